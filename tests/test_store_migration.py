"""Opening a file written with the first schema (v1) upgrades it without loss."""

import json
import os
import sqlite3
import subprocess

import pytest

from rlab.store.db import SchemaVersionError, open_db, schema_version
from rlab.store.migrations import MIGRATIONS, SCHEMA_VERSION
from rlab.store.reader import StoreReader

# The v1 schema as it was released (frozen here on purpose: if someone edits
# migration 1 in place, real old files would no longer match it).
V1_SCHEMA = """
CREATE TABLE runs (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, scenario TEXT NOT NULL,
    config TEXT NOT NULL DEFAULT '{}', status TEXT NOT NULL, created_at REAL NOT NULL,
    ended_at REAL);
CREATE TABLE steps (id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id),
    step INTEGER NOT NULL, reward REAL, reward_std REAL, frac_reward_zero_std REAL, kl REAL,
    entropy REAL, clip_ratio REAL, completions_mean_length REAL, loss REAL, grad_norm REAL,
    metrics TEXT NOT NULL DEFAULT '{}', UNIQUE (run_id, step));
CREATE TABLE "groups" (id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id),
    step INTEGER NOT NULL, idx INTEGER NOT NULL, example_id, prompt TEXT NOT NULL);
CREATE INDEX groups_run_step ON "groups"(run_id, step);
CREATE TABLE trajectories (id INTEGER PRIMARY KEY,
    group_id INTEGER NOT NULL REFERENCES "groups"(id), run_id INTEGER NOT NULL,
    step INTEGER NOT NULL, idx INTEGER NOT NULL, messages TEXT NOT NULL DEFAULT '[]',
    completion TEXT NOT NULL, prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0, reward REAL,
    components TEXT NOT NULL DEFAULT '{}', details TEXT NOT NULL DEFAULT '{}', advantage REAL,
    truncated INTEGER NOT NULL DEFAULT 0);
CREATE INDEX trajectories_group ON trajectories(group_id, idx);
CREATE INDEX trajectories_run ON trajectories(run_id);
CREATE TABLE events (id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id),
    step INTEGER, kind TEXT NOT NULL, payload TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL);
CREATE INDEX events_run ON events(run_id);
CREATE TABLE commands (id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(id),
    kind TEXT NOT NULL, payload TEXT NOT NULL DEFAULT '{}',
    status TEXT NOT NULL DEFAULT 'pending', message TEXT, created_at REAL NOT NULL,
    resolved_at REAL);
CREATE INDEX commands_run_status ON commands(run_id, status);
PRAGMA user_version = 1;
"""
V1_TABLES = ("runs", "steps", "groups", "trajectories", "events", "commands")


def _write_v1_file(path):
    conn = sqlite3.connect(path)
    conn.executescript(V1_SCHEMA)
    conn.execute("INSERT INTO runs VALUES (1, 'old', 'arithmetic', '{\"lr\": 0.001}', "
                 "'finished', 100.0, 200.0)")
    for step in range(3):
        metrics = {"reward": 0.1 * step, "eval/pass_at_1": 0.2 * step, "step_seconds": 1.5}
        conn.execute("INSERT INTO steps (run_id, step, reward, metrics) VALUES (1, ?, ?, ?)",
                     [step, 0.1 * step, json.dumps(metrics)])
        conn.execute('INSERT INTO "groups" (run_id, step, idx, example_id, prompt) '
                     "VALUES (1, ?, 0, ?, 'What is 1 + 1?')", [step, step])
        group_id = conn.execute("SELECT last_insert_rowid()").fetchone()[0]
        for j in range(4):
            details = {"parse_status": "ok" if j else "malformed"}
            conn.execute(
                "INSERT INTO trajectories (group_id, run_id, step, idx, messages, completion, "
                "reward, components, details, advantage) VALUES (?, 1, ?, ?, ?, ?, ?, ?, ?, ?)",
                [group_id, step, j, json.dumps([{"role": "assistant", "content": "2"}]), "2",
                 float(j > 0), json.dumps({"correct": float(j > 0)}), json.dumps(details),
                 0.25 * j])
    conn.execute("INSERT INTO events (run_id, step, kind, payload, created_at) "
                 "VALUES (1, 2, 'alert', '{\"message\": \"hi\"}', 150.0)")
    conn.execute("INSERT INTO commands (run_id, kind, status, created_at) "
                 "VALUES (1, 'pause', 'applied', 120.0)")
    conn.commit()
    conn.close()


def _dump(path, tables):
    conn = sqlite3.connect(path)
    dump = {}
    for table in tables:
        columns = [row[1] for row in conn.execute(f'PRAGMA table_info("{table}")')]
        dump[table] = (columns, conn.execute(f'SELECT * FROM "{table}" ORDER BY id').fetchall())
    conn.close()
    return dump


def test_v1_file_migrates_without_losing_data(tmp_path):
    path = tmp_path / "old.db"
    _write_v1_file(path)
    before = _dump(path, V1_TABLES)
    db = open_db(path, create=False)
    assert schema_version(db) == SCHEMA_VERSION
    db.close()
    after = _dump(path, V1_TABLES)
    for table, (columns, rows) in before.items():
        new_columns, new_rows = after[table]
        assert new_columns[: len(columns)] == columns, table
        assert [row[: len(columns)] for row in new_rows] == rows, table
    # New columns are filled from the data already there.
    reader = StoreReader(path)
    series = reader.step_series(1)
    assert [s["eval/pass_at_1"] for s in series] == [0.0, 0.2, 0.4]
    assert series[2]["step_seconds"] == 1.5
    assert reader.run(1)["last_step"] == 2 and reader.run(1)["status"] == "finished"
    groups = reader.groups_of_step(1, 1)
    assert [t["parse_status"] for t in groups[0]["trajectories"]] == ["malformed", "ok", "ok", "ok"]
    assert groups[0]["superseded"] == 0 and groups[0]["example_id"] == 1
    assert reader.trajectory(1)["turns"] == []
    assert reader.runs()[0]["final_pass_at_1"] == 0.4


def test_v1_run_left_running_is_marked_crashed(tmp_path):
    path = tmp_path / "old.db"
    _write_v1_file(path)
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO runs VALUES (2, 'orphan', 'arithmetic', '{}', 'running', 300.0, "
                 "NULL)")
    conn.commit()
    conn.close()
    reader = StoreReader(path)  # v1 kept no engine pid to check: the run counts as dead
    assert reader.run(2)["status"] == "crashed" and reader.run(1)["status"] == "finished"
    assert reader.events(2)[0]["kind"] == "error"


def test_migration_is_idempotent_across_opens(tmp_path):
    path = tmp_path / "old.db"
    _write_v1_file(path)
    open_db(path).close()
    first = _dump(path, V1_TABLES)
    open_db(path).close()
    assert _dump(path, V1_TABLES) == first


def test_newer_schema_is_refused_with_a_clear_error(tmp_path):
    path = tmp_path / "future.db"
    open_db(path).close()  # a run file a newer Rollout Lab migrated one step further
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(SchemaVersionError, match="upgrade rollout-lab"):
        open_db(path)


def test_v3_turns_get_their_run_and_step(tmp_path):
    path = tmp_path / "v3.db"
    conn = sqlite3.connect(path)
    for statements in MIGRATIONS[:3]:
        for statement in statements:
            conn.execute(statement)
    conn.execute("INSERT INTO runs (id, name, scenario, status, created_at) "
                 "VALUES (4, 'gigpo', 'maze', 'finished', 1.0)")
    conn.execute('INSERT INTO "groups" (id, run_id, step, idx, prompt) VALUES (1, 4, 6, 0, "p")')
    conn.execute("INSERT INTO trajectories (id, group_id, run_id, step, idx, completion) "
                 "VALUES (9, 1, 4, 6, 0, 'c')")
    conn.executemany("INSERT INTO turns (trajectory_id, t, anchor_size) VALUES (9, ?, ?)",
                     [(0, 1), (1, 3)])
    conn.execute("PRAGMA user_version = 3")
    conn.commit()
    conn.close()
    open_db(path).close()
    reader = StoreReader(path)
    assert [(t["run_id"], t["step"]) for t in reader.trajectory(9)["turns"]] == [(4, 6), (4, 6)]
    assert reader.anchor_share_by_step(4) == [{"step": 6, "share": 0.5, "turns": 2}]


def test_read_only_old_file_is_refused_with_a_clear_error(tmp_path):
    path = tmp_path / "old.db"
    _write_v1_file(path)
    path.chmod(0o444)
    # root ignores file modes: make the file immutable instead (chattr +i).
    immutable = os.geteuid() == 0 and subprocess.run(
        ["chattr", "+i", str(path)], capture_output=True).returncode == 0
    if os.access(path, os.W_OK) and not immutable:
        pytest.skip("cannot make a file read-only for this user")
    try:
        with pytest.raises(SchemaVersionError, match="copy it somewhere writable"):
            StoreReader(path)
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=True)


def test_v7_judge_calls_gain_a_response_mode_and_attempts(tmp_path):
    path = tmp_path / "v7.db"
    conn = sqlite3.connect(path)
    for statements in MIGRATIONS[:7]:
        for statement in statements:
            conn.execute(statement)
    conn.execute("INSERT INTO runs (id, name, scenario, status, created_at) "
                 "VALUES (1, 'judged', 'support_replies', 'finished', 1.0)")
    conn.execute('INSERT INTO "groups" (id, run_id, step, idx, prompt) VALUES (5, 1, 1, 0, "p")')
    conn.execute("INSERT INTO judge_calls (run_id, group_id, step, request_hash, model, latency_s, "
                 "prompt_tokens, completion_tokens, created_at) VALUES (1, 5, 1, 'h', 'm', 2.5, 90, 30, 1.0)")
    conn.execute("PRAGMA user_version = 7")
    conn.commit()
    conn.close()
    open_db(path).close()
    reader = StoreReader(path)
    call = reader.judge_calls(1)[0]
    assert (call["latency_s"], call["prompt_tokens"], call["response_mode"], call["attempts"]) == (2.5, 90, None, None)
    group = reader.group(5)
    assert group is not None and group["judge_call"] == {
        "latency_s": 2.5, "prompt_tokens": 90, "completion_tokens": 30, "response_mode": None, "attempts": None}
