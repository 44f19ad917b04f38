"""Issue 19: every CLI failure is one ``rlab: error:`` line (flag or file, and
the fix), a non-zero exit, no traceback, and nothing written or lost; no
secret is stored; checkpoints are pruned. Also the run options generated
from RunConfig (issue 11) and bare ``rlab`` taking them (issue 12)."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fixtures.smalldb import build_small_db
from judge_server import ChatCompletionsServer, Reply, scores_json
from rlab.engine.cli.options import add_run_options, config_from_args
from rlab.engine.run.config import RunConfig
from rlab.engine.run.session import run_dir
from rlab.store.reader import StoreReader
from rlab.store.writer import StoreWriter
from rlab.engine.cli import main as cli

KEY = "rlab-test-secret-0123456789abcdef"


def files(root: Path) -> dict[str, str]:
    """Every file under ``root`` -> sha256 of its bytes (what "nothing written or lost" compares).

    Left out: SQLite's WAL index (``-shm``) and an empty ``-wal``, which any
    reader of a WAL file may create; a ``-wal`` holding data counts."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()
            and not p.name.endswith("-shm") and not (p.name.endswith("-wal") and p.stat().st_size == 0)}


def rlab(*args: str, cwd: Path, env: dict | None = None, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-P", "-m", "rlab.engine.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def one_error_line(stderr: str, *needles: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("rlab: error: "), stderr
    assert "Traceback" not in stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def main(*argv: str) -> int:
    """``rlab ARGV`` in this process; argparse's usage errors exit through SystemExit."""
    try:
        return cli.main(list(argv))
    except SystemExit as exit:
        return exit.code


def tiny(model_dir: Path, db: Path, *extra: str) -> list[str]:
    return ["--model", str(model_dir), "--db", str(db), "--prompts-per-step", "2", "--group-size", "2",
            "--eval-size", "2", "--max-steps", "1", *extra]


# ---- the generated run options ---------------------------------------------------------


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_run_options(parser)
    return parser.parse_args(argv)


def test_every_config_field_is_a_flag_with_help_and_the_defaults_are_the_configs():
    parser = argparse.ArgumentParser()
    add_run_options(parser)
    flags = {s: a for a in parser._actions for s in a.option_strings}
    for name, info in RunConfig.model_fields.items():
        assert info.description, f"RunConfig.{name} has no description (it is the flag's help)"
        if name != "judge":
            assert flags[f"--{name.replace('_', '-')}"].help.startswith(info.description)
    for drifted in ("--lr-final-ratio", "--gigpo-mode", "--max-grad-norm", "--keep-checkpoints",
                    "--judge-model", "--judge-timeout", "--judge-no-cache", "--no-store"):
        assert drifted in flags
    assert flags["--advantage"].choices == ("grpo", "dr_grpo", "rloo", "gigpo")
    assert config_from_args(_parse()) == RunConfig()


def test_typed_values_become_the_config():
    config = config_from_args(_parse(
        "--lr", "1e-3", "--lora-targets", "q_proj, v_proj", "--no-store", "--bf16", "--max-steps", "7",
        "--judge-model", "m", "--judge-timeout", "5", "--judge-price", "0.15,0.6", "--judge-no-cache"))
    assert config.lr == 1e-3 and config.lora_targets == ["q_proj", "v_proj"] and config.max_steps == 7
    assert config.store is False and config.bf16 is True
    assert (config.judge.model, config.judge.timeout_s, config.judge.price, config.judge.use_cache) == \
        ("m", 5.0, (0.15, 0.6), False)
    assert config.judge.weight == 1.0  # the default comes from JudgeSettings, not the CLI


# ---- bad values: the flag and the rule ------------------------------------------------------


@pytest.mark.parametrize("argv, needles", [
    (["--group-size", "1"], ["--group-size 1", "grpo", "advantage 0", "pass --group-size 2"]),
    (["--group-size", "1", "--advantage", "rloo"], ["rloo"]),
    (["--group-size", "1", "--advantage", "dr_grpo"], ["dr_grpo"]),
    (["--group-size", "1", "--advantage", "gigpo"], ["gigpo"]),
    (["--max-steps", "-5"], ["--max-steps -5: must be greater than or equal to 1"]),
    (["--lr", "-1"], ["--lr -1: must be greater than 0"]),
    (["--lr", "abc"], ["--lr abc: must be a valid number"]),
    (["--temperature", "nan"], ["--temperature nan: must be a finite number"]),
    (["--judge-weight", "2"], ["--judge-weight 2:", "--judge-model: required"]),
    (["--judge-model", "m", "--judge-price", "1,2,3"], ["--judge-price 1,2,3:"]),
    (["--advantage", "ppo"], ["argument --advantage: invalid choice: 'ppo'"]),
    (["--scenario", "nope"], ["--scenario: unknown scenario 'nope'"]),
    (["--model", "/nonexistent"], ["model directory /nonexistent not found"]),
    (["--prompts-per-step", "100000"], ["--prompts-per-step 100000", "pass at most"]),
    (["--device", "abacus"], ["--device 'abacus': not a torch device"]),
    (["--threads", "100000"], ["--threads 100000", "pass at most"]),
    (["--group-szie", "4"], ["unrecognized argument --group-szie", "did you mean --group-size?", "rlab run --help"]),
])
def test_bad_options_are_refused_before_anything_starts(tmp_path, monkeypatch, capsys, argv, needles):
    """Headless and TUI alike: one line, exit 2, no run file, no TUI, no engine."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("rlab.engine.cli.frontend.frontend", lambda: pytest.fail("the TUI opened"))
    for command in (["run", "--headless"], []):
        assert main(*command, *argv) == 2
        line = one_error_line(capsys.readouterr().err, *needles)
        assert "pydantic" not in line and "http" not in line
    assert files(tmp_path) == {}


def test_bare_rlab_takes_the_run_options_and_spawns_the_engine_with_them(tmp_path, monkeypatch,
                                                                       raw_tiny_model_dir):
    seen = {}

    class FakeApp:
        def __init__(self, db, *, run_name, engine_cmd):
            seen.update(db=db, name=run_name, cmd=engine_cmd)

        def run(self):
            pass

    monkeypatch.setattr("rlab.tui.app.RolloutLabApp", FakeApp)
    db = tmp_path / "runs.db"
    assert cli.main(["--scenario", "number_guess", "--db", str(db), "--model", str(raw_tiny_model_dir)]) == 0
    cmd = seen["cmd"]
    assert cmd[:4] == [sys.executable, "-P", "-m", "rlab.engine"]
    assert cmd[cmd.index("--scenario") + 1] == "number_guess" and seen["db"] == db
    assert cmd[cmd.index("--name") + 1] == seen["name"]
    # issue 47, 4: the TUI named runs number_guess-1a2b3c4d, a headless run number_guess-20261129-004512-3f9a
    assert re.fullmatch(r"number_guess-\d{8}-\d{6}-[0-9a-f]{4}", seen["name"]), seen["name"]
    assert cmd.count("--db") == 1 and cmd.count("--name") == 1


def test_python_m_rlab_engine_is_the_headless_run(tmp_path):
    result = subprocess.run([sys.executable, "-P", "-m", "rlab.engine", "--max-steps", "-5"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    one_error_line(result.stderr, "--max-steps -5")


def test_the_start_check_imports_neither_torch_nor_transformers(tmp_path):
    """check_options runs in the TUI's process before its first screen: reading a
    scenario's run defaults once imported the engine's session, and with it torch
    and transformers (7.8 s instead of 0.6 s)."""
    code = ("import sys; from rlab.engine.cli.checks import check_options; from rlab.engine.run.config import RunConfig; "
            "check_options(RunConfig(scenario='support_replies', db='r.db')); "
            "heavy = {'torch', 'transformers'} & set(sys.modules); assert not heavy, heavy")
    result = subprocess.run([sys.executable, "-P", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr


def test_rlab_runs_and_export_import_neither_torch_nor_openai(tmp_path):
    build_small_db(tmp_path / "run.db")
    code = ("import sys; from rlab.engine.cli.main import main; "
            f"assert main(['runs', '--db', {str(tmp_path / 'run.db')!r}]) == 0; "
            f"assert main(['export', 'demo', '--out', {str(tmp_path / 'out')!r}, "
            f"'--db', {str(tmp_path / 'run.db')!r}]) == 0; "
            "heavy = {'torch', 'openai', 'textual', 'transformers'} & set(sys.modules); "
            "assert not heavy, heavy")
    result = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


# ---- damaged, read-only and busy run files ----------------------------------------------------


def _garbage(path: Path) -> None:
    path.write_bytes(b"this is not a database\n" * 200)


def _truncated(path: Path) -> None:
    build_small_db(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize("damage", [_garbage, _truncated])
def test_a_damaged_run_file_is_one_line_for_every_command(tmp_path, damage, raw_tiny_model_dir):
    db = tmp_path / "run.db"
    damage(db)
    before = files(tmp_path)
    commands = (["runs", "--db", str(db)], ["export", "demo", "--out", str(tmp_path / "out"), "--db", str(db)],
                ["watch", "--db", str(db)], ["run", "--headless", *tiny(raw_tiny_model_dir, db)],
                [*tiny(raw_tiny_model_dir, db)])
    # At once, as readers of one file: each only reads it, and the default run's time is bounded (CI: 2 cores).
    with ThreadPoolExecutor(len(commands)) as pool:
        results = list(pool.map(lambda argv: rlab(*argv, cwd=tmp_path, timeout=120), commands))
    for argv, result in zip(commands, results):
        assert result.returncode == 2, (argv, result.stderr)
        one_error_line(result.stderr, str(db), "not a readable Rollout Lab run file", "restore")
    assert files(tmp_path) == before


def _read_only(folder: Path) -> list[str]:
    """A command prefix under which ``folder`` is read-only media: a read-only
    bind mount in a private mount namespace as root (root ignores file
    modes), file modes otherwise."""
    if os.geteuid() != 0:
        for path in folder.rglob("*"):
            path.chmod(0o444)
        folder.chmod(0o555)
        return []
    prefix = ["unshare", "-m", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"', str(folder)]
    if shutil.which("unshare") is None or subprocess.run([*prefix, "true"]).returncode != 0:
        pytest.skip("running as root without mount namespaces: cannot make read-only media")
    return prefix


def test_a_run_file_on_read_only_media_is_read_and_not_written(tmp_path):
    folder, out = tmp_path / "media", tmp_path / "out"
    folder.mkdir()
    out.mkdir()
    db = folder / "run.db"
    build_small_db(db)
    before = files(folder)
    prefix = _read_only(folder)

    def ro_rlab(*args):
        return subprocess.run([*prefix, sys.executable, "-P", "-m", "rlab.engine.cli", *args], cwd=out,
                              capture_output=True, text=True, timeout=240)

    try:
        listed = ro_rlab("runs", "--db", str(db), "--json")
        assert listed.returncode == 0, listed.stderr
        assert [r["name"] for r in json.loads(listed.stdout)] == ["demo", "gigpo-demo"]
        exported = ro_rlab("export", "demo", "--out", str(out / "x"), "--db", str(db))
        assert exported.returncode == 0, exported.stderr
        assert (out / "x" / "results.jsonl").stat().st_size > 0
        started = ro_rlab("run", "--headless", "--db", str(db), "--max-steps", "1")
        assert started.returncode == 2
        one_error_line(started.stderr, str(db), "read-only")
    finally:
        for path in [folder, *folder.rglob("*")]:
            path.chmod(0o755)
    assert files(folder) == before


def test_resume_of_a_run_that_is_still_going_is_refused(tmp_path, raw_tiny_model_dir):
    db = tmp_path / "run.db"
    with StoreWriter(db) as writer:  # this test process owns the run: it is alive
        writer.start_run("live", "arithmetic", {}, {})
    before = files(tmp_path)
    result = rlab("run", "--headless", *tiny(raw_tiny_model_dir, db), "--resume", "live", cwd=tmp_path)
    assert result.returncode == 2
    one_error_line(result.stderr, "--resume live", "still running", f"process {os.getpid()}", "stop it first")
    assert files(tmp_path) == before
    with StoreReader(db) as reader:
        assert reader.run_by_name("live")["status"] == "running"


def test_an_existing_run_name_is_refused_before_the_tui(tmp_path, monkeypatch, capsys, raw_tiny_model_dir):
    db = tmp_path / "run.db"
    build_small_db(db)
    before = files(tmp_path)
    monkeypatch.setattr("rlab.engine.cli.frontend.frontend", lambda: pytest.fail("the TUI opened"))
    assert main("--db", str(db), "--name", "gigpo-demo", "--model", str(raw_tiny_model_dir)) == 2
    one_error_line(capsys.readouterr().err, "--name gigpo-demo", "already in", "--resume")
    assert files(tmp_path) == before


# ---- secrets ------------------------------------------------------------------------------


class EchoingJudge(ChatCompletionsServer):
    """Answers the first request 401 with the Authorization header in the
    error text, the rest with scores whose explanations quote the key."""

    def _next_reply(self, body, headers, port):
        super()._next_reply(body, headers, port)
        key = headers["authorization"].removeprefix("Bearer ")
        if len(self.requests) == 1:
            return Reply(status=401, error=f"Incorrect API key: {headers['authorization']} (key {key})")
        return Reply(content=scores_json({"1": 0.9, "2": 0.1}, explanation=f"echo {key}"))


@pytest.mark.e2e
def test_a_key_echoing_judge_leaves_the_key_nowhere(tmp_path, raw_tiny_model_dir):
    db, cache, out = tmp_path / "run.db", tmp_path / "cache", tmp_path / "export"
    env = {"OPENAI_API_KEY": KEY, "RLAB_CACHE_DIR": str(cache)}
    with EchoingJudge([Reply()]) as server:
        result = rlab("run", "--headless", *tiny(raw_tiny_model_dir, db, "--name", "judged", "--prompts-per-step", "3"),
                      "--judge-model", "judge-test", "--judge-base-url", server.base_url,
                      "--judge-max-retries", "0", "--judge-timeout", "10", cwd=tmp_path, env=env)
        assert server.headers and all(KEY in h["authorization"] for h in server.headers)
    assert result.returncode == 0, result.stderr
    exported = rlab("export", "judged", "--out", str(out), "--db", str(db), cwd=tmp_path, env=env)
    assert exported.returncode == 0, exported.stderr
    (tmp_path / "engine.log").write_text(result.stdout + result.stderr + exported.stdout + exported.stderr)
    with sqlite3.connect(db) as conn:
        errors = [e for (e,) in conn.execute('SELECT judge_error FROM "groups"') if e]
    assert errors and all("REDACTED" in e for e in errors), errors  # the failure is kept, the key is not
    everything = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".json" for p in cache.rglob("*")), "the judge cache was not written"
    assert {p.name for p in everything} >= {"run.db", "results.jsonl", "engine.log"}
    leaks = [str(p) for p in everything if KEY.encode() in p.read_bytes()]
    assert leaks == []


# ---- disk: checkpoints kept, steps/s after a resume ------------------------------------------


def test_retention_keeps_the_last_k_and_the_best_by_eval():
    from rlab.engine.train.retention import Checkpoint, to_prune

    ckpts = [Checkpoint(i, step, Path(f"s{step}"), score)
             for i, (step, score) in enumerate([(1, None), (2, 0.9), (3, None), (4, 0.5), (5, None), (6, 0.9)])]
    assert [c.step for c in to_prune(ckpts, 2)] == [1, 2, 3, 4]  # 0.9 tie: the newer (6) is best
    assert [c.step for c in to_prune(ckpts[:5], 2)] == [1, 3]  # 2 is best
    assert to_prune(ckpts, 0) == [] and to_prune([], 3) == []
    assert [c.step for c in to_prune(ckpts, 1)] == [1, 2, 3, 4, 5]


def test_a_run_keeps_k_checkpoints_and_resumes_from_the_last(tmp_path, raw_tiny_model_dir):
    from rlab.engine.step import run

    db = tmp_path / "run.db"
    config = RunConfig(model=raw_tiny_model_dir, db=db, name="disk", max_steps=5, prompts_per_step=2,
                       group_size=2, eval_size=2, eval_every=2, checkpoint_every=1, keep_checkpoints=2)
    run(config)
    with StoreReader(db) as reader:
        kept = reader.checkpoints(reader.run_by_name("disk")["id"])
        evals = {s["step"]: s["eval/pass_at_1"] for s in reader.step_series(reader.run_by_name("disk")["id"])}
    steps = [c["step"] for c in kept]
    best = max((s for s in (2, 4, 5) if evals.get(s) is not None), key=lambda s: (evals[s], s))
    assert steps == sorted({4, 5, best})
    on_disk = sorted(p.name for p in (run_dir(db, "disk") / "checkpoints").iterdir())
    assert on_disk == [f"step-{s:06d}" for s in steps]
    summary = run(config.model_copy(update={"name": None, "resume": "disk", "max_steps": 6}))
    assert summary["steps"] == 1 and summary["last_step"] == 6


def test_progress_line_counts_steps_per_second_from_the_first_resumed_step(capsys):
    from rlab.engine.step import _progress

    _progress(52, {"reward": 0.5}, elapsed=2.0, done=2)
    assert capsys.readouterr().err.strip().endswith("1.00 steps/s")


# ---- what a newcomer and a fuzzer met (issue 33) ----------------------------------------------


def _task(folder: Path, rewards: str) -> Path:
    folder.mkdir()
    (folder / "train.jsonl").write_text("".join(json.dumps({"prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n"
                                                for i in range(20)))
    (folder / "rewards.py").write_text(rewards)
    (folder / "task.toml").write_text('train = "train.jsonl"\nrewards = "rewards.py"\n')
    return folder


@pytest.mark.parametrize("rewards, needles", [
    ("def correct(example, completion):\n    return 1.0\n\ndef broken(:\n", ["line 4", "SyntaxError"]),
    ("import no_such_module_here\n\ndef correct(example, completion):\n    return 1.0\n",
     ["ImportError", "line 1", "no_such_module_here"]),
])
def test_a_reward_file_that_does_not_load_fails_the_start_at_once_and_leaves_no_run_file(
        tmp_path, raw_tiny_model_dir, rewards, needles):
    task = _task(tmp_path / "task", rewards)
    for argv in (["run", "--headless"], []):  # headless, and before the TUI opens
        result = rlab(*argv, "--task", str(task), *tiny(raw_tiny_model_dir, tmp_path / "x.db"), cwd=tmp_path,
                      timeout=60)
        assert result.returncode == 2, result.stderr
        one_error_line(result.stderr, *needles)
        assert "Generating" not in result.stderr  # no dataset progress bar
        assert not list(tmp_path.glob("x.db*")) and not (tmp_path / "rlab_runs").exists()


def test_a_file_without_runs_is_said_so_by_runs_and_watch(tmp_path):
    db = tmp_path / "empty.db"
    StoreWriter(db).close()
    assert rlab("runs", "--db", str(db), cwd=tmp_path).stdout.strip() == f"no runs in {db}"
    watched = rlab("watch", "--db", str(db), cwd=tmp_path, timeout=60)
    assert watched.returncode == 2
    one_error_line(watched.stderr, "no runs in", "rlab run --db")


def test_another_applications_sqlite_file_is_left_untouched(tmp_path, raw_tiny_model_dir):
    db = tmp_path / "app.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE contacts (name TEXT)")
        conn.execute("INSERT INTO contacts VALUES ('ada')")
    conn.close()
    before = files(tmp_path)
    for argv in (["runs", "--db", str(db)], ["watch", "--db", str(db)], ["run", "--headless", *tiny(raw_tiny_model_dir, db)]):
        result = rlab(*argv, cwd=tmp_path, timeout=120)
        assert result.returncode == 2, (argv, result.stderr)
        one_error_line(result.stderr, "SQLite file of another application (tables: contacts)", "another --db")
    assert files(tmp_path) == before
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 0
    conn.close()


@pytest.mark.parametrize("schema, shown", [
    ("CREATE TABLE runs (id INTEGER PRIMARY KEY, who TEXT)", "(tables: runs)"),
    ("CREATE TABLE contacts (name TEXT); PRAGMA user_version = 3", "(tables: contacts; user_version 3)"),
    ("CREATE TABLE contacts (name TEXT); PRAGMA user_version = 99", "(tables: contacts; user_version 99)"),
    ("CREATE TABLE runs (id INTEGER PRIMARY KEY, name TEXT, scenario TEXT, config TEXT, status TEXT, "
     "created_at REAL); CREATE TABLE steps (id INTEGER); PRAGMA user_version = 2", "(tables: runs, steps; "),
])
def test_a_file_with_a_runs_table_or_a_schema_version_of_its_own_is_no_run_file(
        tmp_path, monkeypatch, capsys, raw_tiny_model_dir, schema, shown):
    """Issue 40: a ``runs`` table, or any user_version, let another application's file through:
    ``rlab runs`` switched it to WAL ("copy it somewhere writable so it can be upgraded"), and
    ``rlab run`` failed half-way with "table runs already exists"."""
    db = tmp_path / "app.db"
    conn = sqlite3.connect(db)
    conn.executescript(schema)
    conn.close()
    before = files(tmp_path)
    monkeypatch.setattr("rlab.tui.app.RolloutLabApp.run", lambda self: pytest.fail("the TUI opened"))
    for argv in (["runs", "--db", str(db)], ["watch", "--db", str(db)],
                 ["run", "--headless", *tiny(raw_tiny_model_dir, db)]):
        assert main(*argv) == 2, argv
        one_error_line(capsys.readouterr().err, f"{db} is an SQLite file of another application {shown}",
                       "not a Rollout Lab run file", "left as it is", "another --db")
    assert files(tmp_path) == before and not list(tmp_path.glob("app.db-*"))
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    conn.close()


def test_a_run_is_not_appended_to_a_file_with_damaged_pages(tmp_path, raw_tiny_model_dir):
    db = tmp_path / "runs.db"
    build_small_db(db)
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.close()
    with db.open("r+b") as handle:  # scribble over a page in the middle; the header stays intact
        handle.seek(page_size * (pages // 2))
        handle.write(b"\xff" * page_size)
    before = files(tmp_path)
    result = rlab("run", "--headless", *tiny(raw_tiny_model_dir, db), cwd=tmp_path, timeout=120)
    assert result.returncode == 2, result.stderr
    one_error_line(result.stderr, str(db), "malformed")
    assert files(tmp_path) == before


def test_a_file_damaged_mid_page_is_one_line_naming_the_damage_and_the_recovery(tmp_path, monkeypatch, capsys):
    """Issue 40: scribbled over inside a page of trajectories (the header and the runs table intact),
    the file was listed by ``rlab runs`` as a normal finished run and ``rlab watch`` showed a
    DatabaseError traceback."""
    db = tmp_path / "runs.db"
    build_small_db(db)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.close()
    # the last page holds the newest trajectories' rows, which the first screen reads: their cells
    # fill a page from its end, so the last quarter is rows whatever the page's free space
    with db.open("r+b") as handle:
        handle.seek(page_size * pages - page_size // 4)
        handle.write(b"\xff" * (page_size // 4))
    before = files(tmp_path)
    monkeypatch.setattr("rlab.tui.app.RolloutLabApp.run", lambda self: pytest.fail("the TUI opened"))
    for argv in (["runs", "--db", str(db)], ["runs", "--db", str(db), "--json"], ["watch", "--db", str(db)],
                 ["export", "demo", "--out", str(tmp_path / "out"), "--db", str(db)]):
        assert main(*argv) == 2, argv
        out, err = capsys.readouterr()
        assert out == ""
        one_error_line(err, f"{db} is damaged", "malformed", f"sqlite3 {db} .recover", "restore it from a copy")
    assert files(tmp_path) == before


def test_run_names_are_folder_names_and_two_run_files_never_share_a_runs_folder(tmp_path, capsys):
    assert main("run", "--headless", "--name", "../../x", "--db", str(tmp_path / "a.db")) == 2
    one_error_line(capsys.readouterr().err, "--name ../../x", "letters, digits")
    assert run_dir(tmp_path / "a.db", "exp") != run_dir(tmp_path / "b.db", "exp")
    assert run_dir(tmp_path / "a.db", "exp").parent.parent == tmp_path / "rlab_runs"


def test_two_run_files_with_a_run_of_one_name_keep_their_checkpoints_apart(tmp_path, raw_tiny_model_dir):
    from rlab.engine.step import run

    for db, seed in (("a.db", 1), ("b.db", 2)):
        config = RunConfig.model_validate({"model": raw_tiny_model_dir, "db": tmp_path / db, "name": "same",
                                           "seed": seed, "max_steps": 2, "prompts_per_step": 2, "group_size": 2,
                                           "eval_size": 2, "checkpoint_every": 2})
        run(config)
    with StoreReader(tmp_path / "a.db") as a, StoreReader(tmp_path / "b.db") as b:
        paths = [r.checkpoints(r.run_by_name("same")["id"])[-1]["path"] for r in (a, b)]
    assert paths[0] != paths[1] and Path(paths[0]).exists() and Path(paths[1]).exists()


def test_run_help_names_the_alert_flag_as_readme_and_watch_do(capsys):
    """README and `rlab watch` say --alert; `rlab run --help` said --alerts (the field's name).
    The field's name still works."""
    assert main("run", "--help") == 0
    usage = " ".join(capsys.readouterr().out.split())
    assert "[--alert NAME=VALUE]" in usage and "[--alerts" not in usage
    for spelling in ("--alert", "--alerts"):
        assert config_from_args(_parse(spelling, "length_drift=0.3")).alerts == {"length_drift": 0.3}


@pytest.mark.parametrize("argv, says", [
    (["eval", "--name", "../x"], "letters, digits"),
    (["select", "-n", "2", "--name", "a\nb"], "letters, digits"),
    (["eval", "--name", "x" * 300], "letters, digits"),
    (["watch", "--follow", ""], "'' is no folder"),
    (["watch", "--follow", "d" * 300], "not a folder (File name too long)"),
    (["fork", "base@²", "--name", "f"], "the step after @ must be a number"),
    (["compare", "a", "b", "--from-step", "-5"], "'-5' is not an integer >= 0"),
    (["compare", "a", "b", "--flips", "-1"], "'-1' is not an integer >= 0"),
    (["run", "--headless", "--name", "a\nb"], "--name 'a\\nb': "),
], ids=["eval-name-path", "select-name-newline", "eval-name-long", "follow-empty", "follow-long", "fork-step",
        "compare-from-step", "compare-flips", "run-name-newline"])
def test_names_and_numbers_are_checked_in_one_line(tmp_path, monkeypatch, capsys, argv, says):
    """Issue 47, 6: these were accepted (a run named ../x, the working folder imported, a Unicode
    digit as a step, a negative step) or split the error line (a newline in a name)."""
    monkeypatch.chdir(tmp_path)
    assert main(*argv, "--db", str(tmp_path / "r.db")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err, err
    assert not (tmp_path / "rlab_runs").exists()


# ---- which errors are the user's (issue 46, 2) ------------------------------------------


def test_a_bug_in_a_file_command_keeps_its_traceback_while_user_errors_stay_one_line(
        tmp_path, monkeypatch, capsys):
    """A KeyError or ValueError of ours inside `rlab runs` or `rlab export` propagates with its
    traceback; an unknown run (the user's) is still the one line."""
    db = tmp_path / "run.db"
    build_small_db(db)
    assert main("export", "no-such-run", "--out", str(tmp_path / "out"), "--db", str(db)) == 2
    one_error_line(capsys.readouterr().err, "no run named or numbered 'no-such-run'")

    def broken(*args, **kwargs):
        raise KeyError("steps_total")  # a bug of ours, e.g. a column renamed

    monkeypatch.setattr("rlab.store.export.list_runs", broken)
    with pytest.raises(KeyError, match="steps_total"):
        main("runs", "--db", str(db))
    monkeypatch.setattr("rlab.store.export.export_run", lambda *a, **k: int("x"))
    with pytest.raises(ValueError, match="invalid literal"):
        main("export", "gigpo-demo", "--out", str(tmp_path / "out"), "--db", str(db))


def test_without_a_registered_tui_the_run_says_so_in_one_line(tmp_path, monkeypatch, capsys, raw_tiny_model_dir):
    """The engine reaches the TUI only through the rlab.frontend entry point; none there is
    one line naming the fix, before anything is written."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("rlab.engine.cli.frontend.entry_points", lambda group: [])
    assert main("--model", str(raw_tiny_model_dir), "--db", str(tmp_path / "r.db")) == 2
    one_error_line(capsys.readouterr().err, "no TUI is installed", "--headless")
    assert files(tmp_path) == {}


def test_the_tui_is_the_registered_frontend():
    from importlib.metadata import entry_points

    from rlab.engine.cli.frontend import FRONTEND_GROUP, frontend
    from rlab.tui.launch import TextualFrontend

    assert [e.value for e in entry_points(group=FRONTEND_GROUP)] == ["rlab.tui.launch:TextualFrontend"]
    assert isinstance(frontend(), TextualFrontend)
