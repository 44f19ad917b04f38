"""A real two-process TRL run with the lab attached: torchrun, gloo, the tiny model, CPU.

tests/trl_attach_script.py is a GRPO script of the usual shape with
``RlabCallback`` added in one line; it runs under ``torchrun --standalone
--nproc_per_node 2`` (one process per "GPU"; gloo on CPU) while this test,
another process, steers it through the run file as ``rlab`` in another
terminal would: pause, a refused and an accepted reward edit, resume, a
single step, stop; ``rlab set``; and ``kill -9`` of either process. Each run starts two
Python processes that import torch, transformers and TRL (20-40 s on two
cores), so the tests are slow-marked:

    .venv/bin/pip install -e ".[dev,trl]"
    .venv/bin/python -m pytest -q -m slow tests/test_trl_attach_live.py
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from judge_server import ChatCompletionsServer, Reply, scores_json
from rlab.engine.rewards.edit.submit import submit
from rlab.store.control import send_command
from rlab.store.reader import StoreReader

# each starts two processes that import torch and TRL: minutes when the machine is busy
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "trl_attach_script.py"
FIXTURES = REPO / "tests" / "fixtures" / "trl_attach"
JUDGE_SCORES = {"1": 0.9, "2": 0.1, "3": 0.6, "4": 0.3}
PER_STEP = 8  # 2 processes x per_device_train_batch_size 4: two groups of 4


def launch(tmp_path: Path, model: Path, *extra: str) -> subprocess.Popen:
    """torchrun --standalone --nproc_per_node 2 tests/trl_attach_script.py (gloo, CPU)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    log = open(tmp_path / "torchrun.log", "wb")
    return subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(SCRIPT),
         "--model", str(model), "--out", str(tmp_path / "grpo-out"), "--db", str(tmp_path / "runs.db"),
         "--trace", str(tmp_path / "trace"), *extra],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def documented_command(tmp_path: Path, steps: int) -> list[str]:
    """docs/scale.md's worked example, read from the page (so a doc edit is what
    runs), with its run file and output folder under ``tmp_path`` and ``--steps``
    cut to ``steps``; torchrun is this Python's ``-m torch.distributed.run``."""
    page = (REPO / "docs" / "scale.md").read_text()
    [block] = [b for b in re.findall(r"```bash\n(.*?)```", page, re.S) if "trl_attach_script.py" in b]
    argv = shlex.split(block.replace("\\\n", " "))
    assert argv[0].endswith("torchrun"), block
    values = {"--out": str(tmp_path / "demo"), "--db": str(tmp_path / "demo.db"), "--steps": str(steps)}
    argv = [values.get(prev, arg) for prev, arg in zip(["", *argv], argv)]
    return [sys.executable, "-m", "torch.distributed.run", *argv[1:]]


def log_tail(tmp_path: Path) -> str:
    return (tmp_path / "torchrun.log").read_text(errors="replace")[-4000:]


def wait_for(what: str, predicate, proc: subprocess.Popen, tmp_path: Path, timeout: float = 240.0):
    """Poll ``predicate`` until it returns something truthy; fail with the run's log otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc.poll() is not None and not predicate():
            pytest.fail(f"torchrun exited ({proc.returncode}) while waiting for {what}:\n{log_tail(tmp_path)}")
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}:\n{log_tail(tmp_path)}")


def read(db: Path, fn):
    if not db.exists():
        return None
    with StoreReader(db) as reader:
        runs = reader.runs()
        return fn(reader, runs[0]["id"]) if runs else None


def last_step(db: Path) -> int:
    return read(db, lambda r, rid: max(r.steps(rid), default=0)) or 0


def traced(tmp_path: Path) -> list[tuple[int, int]]:
    """(next step, pid) of each process, from its trace file."""
    out = []
    for rank in (0, 1):
        path = tmp_path / "trace" / f"rank{rank}"
        step, pid = path.read_text().split() if path.exists() else ("0", "0")
        out.append((int(step), int(pid)))
    return out


def traced_lr(tmp_path: Path) -> list[dict[int, float]]:
    """Each process's optimizer learning rate at each step's end (the next update's), by step."""
    return [{int(step): float(lr) for step, lr in (line.split() for line in
                                                   (tmp_path / "trace" / f"lr{rank}").read_text().splitlines())}
            for rank in (0, 1)]


def rlab_process(*argv: str) -> subprocess.CompletedProcess:
    """``rlab ...`` typed in another terminal: a process of its own."""
    return subprocess.run([sys.executable, "-P", "-m", "rlab.engine.cli", *argv], capture_output=True, text=True,
                          timeout=300)


def rlab(*argv: str) -> int:
    """``rlab ...`` as a user types it in another terminal (here: this process)."""
    from rlab.engine.cli.main import main

    return main(list(argv))


def stop(proc: subprocess.Popen, tmp_path: Path) -> None:
    """End torchrun and its workers (they run in sessions of their own: killing torchrun
    alone would leave them waiting in a collective until the script's ddp_timeout)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # torchrun stops its workers
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
    for _, pid in traced(tmp_path):
        try:
            if pid and str(SCRIPT) in Path(f"/proc/{pid}/cmdline").read_text():
                os.kill(pid, signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError):
            pass


def text(value) -> str:
    return value if isinstance(value, str) else value[-1]["content"]


def test_two_processes_pause_edit_resume_step_and_stop(tmp_path, raw_tiny_model_dir):
    pytest.importorskip("trl")
    db = tmp_path / "runs.db"
    with ChatCompletionsServer([Reply(content=scores_json(JUDGE_SCORES))]) as judge:
        proc = launch(tmp_path, raw_tiny_model_dir, "--steps", "400", "--judge-url", judge.base_url,
                      "--log-completions")
        try:
            wait_for("two stored steps", lambda: last_step(db) >= 2, proc, tmp_path)
            name, rid = read(db, lambda r, rid: (r.run(rid)["name"], rid))
            # pause from another process: every process stops after the same optimizer step
            assert rlab("pause", name, "--db", str(db)) == 0
            wait_for("the pause", lambda: read(db, lambda r, rid: r.run(rid)["status"]) == "paused", proc,
                     tmp_path)
            paused_at = read(db, lambda r, rid: [e["step"] for e in r.events(rid) if e["kind"] == "pause"][-1])
            time.sleep(2.5)  # several of the main process's "still paused" beats
            assert last_step(db) == paused_at
            assert [step for step, _ in traced(tmp_path)] == [paused_at, paused_at]  # no process ran ahead
            # a file that does not compile: refused by rlab reward's own check, nothing sent
            assert rlab("reward", name, str(FIXTURES / "rewards_syntax.py"), "--db", str(db)) == 2
            # a file that raises, sent past that check: the run's gate refuses it, the run keeps version 1
            raises = send_command(db, rid, "set_rewards", {
                "source": (FIXTURES / "rewards_raises.py").read_text(), "weights": {"correct": 1.0}})
            wait_for("the refusal", lambda: read(db, lambda r, rid: next(
                c["status"] for c in r.commands(rid) if c["id"] == raises) == "rejected"), proc, tmp_path)
            # the checked edit (dry run printed by rlab reward): every process loads version 2 now
            edit = submit(db, name, FIXTURES / "rewards_v2.py", wait_s=5)
            assert "dry run on the last" in edit.text and "mean reward" in edit.text
            wait_for("the edit", lambda: read(db, lambda r, rid: next(
                c["status"] for c in r.commands(rid) if c["id"] == edit.command_id) == "applied"), proc,
                     tmp_path)
            assert rlab("resume", name, "--db", str(db)) == 0
            wait_for("three more steps", lambda: last_step(db) >= paused_at + 3, proc, tmp_path)
            # pause again, then one single step
            assert rlab("pause", name, "--db", str(db)) == 0
            wait_for("the second pause", lambda: read(db, lambda r, rid: r.run(rid)["status"]) == "paused",
                     proc, tmp_path)
            second = read(db, lambda r, rid: [e["step"] for e in r.events(rid) if e["kind"] == "pause"][-1])
            assert rlab("step", name, "--db", str(db)) == 0
            wait_for("the single step", lambda: read(db, lambda r, rid: [
                (e["step"], e["payload"].get("reason")) for e in r.events(rid) if e["kind"] == "pause"][-1])
                == (second + 1, "single step done"), proc, tmp_path)
            time.sleep(1.5)
            assert last_step(db) == second + 1
            assert [step for step, _ in traced(tmp_path)] == [second + 1, second + 1]
            send_command(db, rid, "stop")
            assert proc.wait(180) == 0, log_tail(tmp_path)
        finally:
            stop(proc, tmp_path)
        judge_requests = len(judge.requests)

    with StoreReader(db) as reader:
        run = reader.run(rid)
        steps = reader.steps(rid)
        groups = {s: [reader.group(g["id"]) for g in reader.groups_of_step(rid, s)] for s in steps}
        events = [(e["step"], e["kind"], e["payload"]) for e in reader.events(rid)]
        commands = [(c["kind"], c["status"]) for c in reader.commands(rid)]
        versions = reader.reward_versions(rid)
        judge_calls = reader.judge_calls(rid, limit=10_000)
        metrics = {m["step"]: m for m in reader.step_metrics(rid)}
    assert run["status"] == "stopped" and steps == list(range(1, second + 2))
    # every trajectory once, from both processes: two groups of 4 per step, one from each process
    for step, step_groups in groups.items():
        assert [len(g["trajectories"]) for g in step_groups] == [4, 4], step
        assert [{t["details"]["rank"] for t in g["trajectories"]} for g in step_groups] == [{0}, {1}], step
        expected = 1 if step <= paused_at else 2
        assert {t["reward_version"] for g in step_groups for t in g["trajectories"]} == {expected}, step
        assert all(g["example"]["answer"] and g["judge_status"] == "ok" for g in step_groups)
        assert sorted(t["judge_score"] for t in step_groups[0]["trajectories"]) == [0.1, 0.3, 0.6, 0.9]
        assert "success_rate" in metrics[step] and metrics[step]["reward_version"] == expected
    # ... and exactly what TRL itself logged for that step (its completions Parquet files)
    for step in steps:
        table = pq.read_table(tmp_path / "grpo-out" / "completions" / f"completions_{step:05d}.parquet").to_pylist()
        ours = [t for g in groups[step] for t in g["trajectories"]]
        assert [(text(r["prompt"]), text(r["completion"])) for r in table] == \
            [(g["prompt"], t["completion"]) for g in groups[step] for t in g["trajectories"]], step
        assert [r["advantage"] for r in table] == pytest.approx([t["advantage"] for t in ours])
        for row, t in zip(table, ours):
            assert {k: row[k] for k in t["components"]} == pytest.approx(t["components"])
    assert sorted(set(groups[paused_at + 1][0]["trajectories"][0]["components"])) == \
        ["brief", "correct", "digits_only", "ruler"]
    # the versions, the edit's step on both processes, and the commands' fates
    assert [v["version"] for v in versions] == [1, 2]
    assert "def correct" in versions[0]["source"] and versions[1]["weights"]["digits_only"] == 0.5
    [edit_event] = [e for e in events if e[1] == "reward_edit"]
    assert edit_event[0] == paused_at and edit_event[2]["processes"] == {"0": 2, "1": 2}
    assert edit_event[2]["from_step"] == paused_at + 1
    assert commands == [("pause", "applied"), ("set_rewards", "rejected"), ("set_rewards", "applied"),
                        ("resume", "applied"), ("pause", "applied"), ("step", "applied"), ("stop", "applied")]
    kinds = [(s, k) for s, k, _ in events if k in ("pause", "resume")]
    assert kinds == [(paused_at, "pause"), (paused_at, "resume"), (second, "pause"), (second, "resume"),
                     (second + 1, "pause")]
    # one judge call per group, stored with its group
    assert len(judge_calls) == judge_requests == 2 * len(steps)
    assert {c["group_id"] for c in judge_calls} == {g["id"] for gs in groups.values() for g in gs}


def test_rlab_set_changes_the_lr_on_both_processes_and_refuses_what_trl_cannot_change(tmp_path,
                                                                                      raw_tiny_model_dir):
    """Issue 38: ``rlab set`` on a two-process TRL run. lr reaches both processes' optimizers at
    one step end, as the peak of TRL's schedule; temperature (TRL_REFUSED) and a bad lr are
    refused by the command itself in one line, and nothing is sent."""
    pytest.importorskip("trl")
    db = tmp_path / "runs.db"
    steps, first, new = 400, 1e-5, 3e-5  # the script's GRPOConfig(learning_rate=1e-5), no warm-up
    proc = launch(tmp_path, raw_tiny_model_dir, "--steps", str(steps))
    try:
        wait_for("two stored steps", lambda: last_step(db) >= 2, proc, tmp_path)
        name, rid = read(db, lambda r, rid: (r.run(rid)["name"], rid))
        done = rlab_process("set", name, "lr=3e-5", "--db", str(db), "--wait", "240")
        assert (done.returncode, done.stderr) == (0, ""), done.stderr + log_tail(tmp_path)
        [event] = read(db, lambda r, rid: [e for e in r.events(rid) if e["kind"] == "settings"])
        since = event["payload"]["from_step"]  # the first step it trains, marked at that step
        assert event["step"] == since and event["payload"] == {"version": 1, "changes": {"lr": new},
                                                               "from_step": since}
        assert done.stdout == f"run {name}: settings version 1 from step {since}: lr={new}\n"
        sent = read(db, lambda r, rid: r.commands(rid))
        for words, why in [("temperature=0.9", "temperature cannot change on a TRL run: GRPOTrainer bakes it "
                                               "into the loss's log-probability head"),
                           ("lr=-1", "--lr -1: must be greater than 0")]:
            refused = rlab_process("set", name, words, "--db", str(db))
            assert (refused.returncode, refused.stdout) == (2, ""), refused.stdout + refused.stderr
            [line] = refused.stderr.splitlines()
            assert line.startswith(f"rlab: error: {why}"), line
        assert read(db, lambda r, rid: r.commands(rid)) == sent
        wait_for("three steps at the new rate", lambda: last_step(db) >= since + 2, proc, tmp_path)
        send_command(db, rid, "stop")
        assert proc.wait(180) == 0, log_tail(tmp_path)
    finally:
        stop(proc, tmp_path)

    with StoreReader(db) as reader:
        stored = reader.steps(rid)
        metrics = {m["step"]: m for m in reader.step_metrics(rid)}
        commands = [(c["kind"], c["status"]) for c in reader.commands(rid)]
        events = [e["kind"] for e in reader.events(rid)]
    assert commands == [("set_settings", "applied"), ("stop", "applied")] and events.count("settings") == 1
    assert stored == list(range(1, len(stored) + 1)) and len(stored) >= since + 2
    # the peak each step ran under, and its version: the new one from the step it was set for
    assert {s: (m["settings/lr"], m["settings/version"]) for s, m in metrics.items()} == \
        {s: (new, 1.0) if s >= since else (first, 0.0) for s in stored}
    # each update's rate (TRL's linear decay over the steps, from the new peak on): every process's
    # optimizer holds it at the previous step's end, and TRL logs it at its step (logging_steps=1)
    rate = {s: (new if s >= since else first) * ((steps - s + 1) / steps) for s in range(1, stored[-1] + 2)}
    assert traced_lr(tmp_path) == [{s: rate[s + 1] for s in stored}] * 2
    assert {s: m["learning_rate"] for s, m in metrics.items()} == {s: rate[s] for s in stored}


def test_the_documented_command_runs_as_written(tmp_path):
    """docs/scale.md section 5, as a user types it: no --model, so each process
    gets the tiny policy the script builds (issue 40: rank 1 found no model)."""
    pytest.importorskip("trl")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(documented_command(tmp_path, steps=2), cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with StoreReader(tmp_path / "demo.db") as reader:
        [run] = reader.runs()
        assert (run["name"], run["status"]) == ("demo-trl", "finished")
        assert reader.steps(run["id"]) == [1, 2]


@pytest.mark.parametrize("victim", [0, 1], ids=["main-process", "other-process"])
def test_kill_9_of_a_process_leaves_the_file_consistent(tmp_path, raw_tiny_model_dir, victim):
    pytest.importorskip("trl")
    db = tmp_path / "runs.db"
    proc = launch(tmp_path, raw_tiny_model_dir, "--steps", "400")
    try:
        wait_for("three stored steps", lambda: last_step(db) >= 3, proc, tmp_path)
        os.kill(traced(tmp_path)[victim][1], signal.SIGKILL)
        assert proc.wait(180) != 0
    finally:
        stop(proc, tmp_path)
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    with StoreReader(db) as reader:  # opening it notices the writer is gone
        rid = reader.runs()[0]["id"]
        run = reader.run(rid)
        steps = reader.steps(rid)
        per_step = {s: [len(reader.group(g["id"])["trajectories"]) for g in reader.groups_of_step(rid, s)]
                    for s in steps}
        metrics = {m["step"]: m for m in reader.step_metrics(rid)}
        with sqlite3.connect(db) as conn:
            twice = conn.execute("SELECT COUNT(*) FROM (SELECT step, group_id, idx FROM trajectories "
                                 "GROUP BY step, group_id, idx HAVING COUNT(*) > 1)").fetchone()[0]
    assert run["status"] == "crashed"
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 3
    assert all(sizes == [4, 4] for sizes in per_step.values()), per_step
    assert all(metrics[s]["reward"] is not None for s in steps) and twice == 0
