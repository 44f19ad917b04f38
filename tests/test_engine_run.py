"""The engine end to end: headless runs, the control channel, bad input, kill and resume.

These tests run the real engine (as a subprocess where the issue says a
process) on an untrained tiny model, so they check plumbing, not learning;
learning is measured by tests/bench/learning_curve.py.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlab.engine.run.config import RunConfig
from rlab.engine.step import run
from rlab.store.control import send_command
from rlab.store.db import open_db
from rlab.store.reader import StoreReader
from rlab.store.writer import StoreWriter
from rlab.engine.cli.main import main


def _rlab(*args, cwd, timeout=240, env=None):
    return subprocess.run([sys.executable, "-m", "rlab.engine.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def _spawn_engine(cwd, model_dir, db, name) -> subprocess.Popen:
    """The headless engine as its own process (no held-out eval during the run)."""
    return subprocess.Popen([sys.executable, "-m", "rlab.engine.cli", "run", "--headless", "--model", str(model_dir),
                             "--db", str(db), "--name", name, *_fast(eval_every=100)],
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _fast(**kw):
    base = dict(prompts_per_step=4, group_size=4, eval_size=20, eval_every=2, checkpoint_every=2)
    return [f"--{k.replace('_', '-')}={v}" for k, v in {**base, **kw}.items()]


@pytest.mark.e2e
def test_headless_run_prints_the_summary_and_stores_everything(tmp_path, raw_tiny_model_dir):
    db = tmp_path / "run.db"
    result = _rlab("run", "--headless", "--model", str(raw_tiny_model_dir), "--db", str(db),
                   "--max-steps", "3", "--name", "smoke", *_fast(), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 3 and summary["status"] == "finished"
    for key in ("run_id", "seconds", "eval_pass_at_1_initial", "eval_pass_at_1_final"):
        assert key in summary
    reader = StoreReader(db)
    series = reader.step_series(summary["run_id"])
    assert [s["step"] for s in series] == [0, 1, 2, 3]
    assert series[1]["reward"] is not None and "frac_reward_zero_std" in series[1]
    assert series[2]["eval/pass_at_1"] is not None
    groups = reader.groups_of_step(summary["run_id"], 1)
    assert len(groups) == 4 and all(len(g["trajectories"]) == 4 for g in groups)
    assert groups[0]["example"]["answer"]  # whole example kept for reward dry runs
    assert [c["step"] for c in reader.checkpoints(summary["run_id"])] == [2, 3]
    assert reader.run(summary["run_id"])["status"] == "finished"


@pytest.mark.parametrize("args, message", [
    (["--scenario", "chess"], "unknown scenario 'chess'"),
    (["--model", "/no/such/model"], "model directory /no/such/model not found"),
    (["--db", "/no/such/dir/run.db"], "folder /no/such/dir does not exist"),
])
def test_bad_input_gives_one_clear_line(tmp_path, args, message):
    result = _rlab("run", "--headless", "--max-steps", "1", *args, cwd=tmp_path, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlab: error: ") and message in lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.e2e
def test_pause_step_resume_and_stop_through_the_control_table(tmp_path, raw_tiny_model_dir):
    db = tmp_path / "ctl.db"
    proc = _spawn_engine(tmp_path, raw_tiny_model_dir, db, "ctl")
    try:
        reader = _wait_for_run(db, "ctl")
        run_id = reader.run_by_name("ctl")["id"]
        send_command(db, run_id, "pause")
        _wait(lambda: reader.run(run_id)["status"] == "paused")
        paused_at = _last_step(reader, run_id)
        time.sleep(1.0)
        assert _last_step(reader, run_id) == paused_at  # the step counter stops
        send_command(db, run_id, "step")
        _wait(lambda: _last_step(reader, run_id) == paused_at + 1 and reader.run(run_id)["status"] == "paused")
        time.sleep(0.8)
        assert _last_step(reader, run_id) == paused_at + 1  # exactly one more step
        send_command(db, run_id, "resume")
        _wait(lambda: _last_step(reader, run_id) >= paused_at + 3)
        assert main(["stop", "ctl", "--db", str(db)]) == 0  # what `rlab stop ctl` sends
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["status"] == "stopped"
    kinds = [e["kind"] for e in reader.events(run_id)]
    assert kinds.count("pause") == 2 and kinds.count("resume") == 2
    assert {c["status"] for c in reader.commands(run_id)} == {"applied"}


@pytest.mark.e2e
def test_sigkill_mid_run_then_resume_continues_the_step_numbers(tmp_path, raw_tiny_model_dir):
    db = tmp_path / "kill.db"
    proc = _spawn_engine(tmp_path, raw_tiny_model_dir, db, "victim")
    reader = _wait_for_run(db, "victim")
    run_id = reader.run_by_name("victim")["id"]
    _wait(lambda: _last_step(reader, run_id) >= 5)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()
    open_db(db).conn.close()  # opening the file marks the dead run
    assert StoreReader(db).run(run_id)["status"] == "crashed"
    committed = StoreReader(db).steps(run_id)
    checkpoint = max(c["step"] for c in StoreReader(db).checkpoints(run_id))

    result = _rlab("run", "--headless", "--db", str(db), "--resume", "victim", "--max-steps",
                   str(checkpoint + 3), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    reader = StoreReader(db)
    steps = [s["step"] for s in reader.step_series(run_id) if s.get("reward") is not None]
    assert steps == list(range(1, checkpoint + 4))  # continuing numbers, no duplicates
    assert reader.run(run_id)["status"] == "finished"
    assert len(committed) >= 5


def test_in_process_run_with_the_writer_disabled_writes_nothing(tmp_path, raw_tiny_model_dir):
    db = tmp_path / "off.db"
    summary = run(RunConfig(model=raw_tiny_model_dir, db=db, max_steps=2, store=False, prompts_per_step=2,
                            group_size=2, eval_size=5))
    assert summary["steps"] == 2
    assert not db.exists() or StoreReader(db).runs() == []


def _wait(predicate, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def _wait_for_run(db, name) -> StoreReader:
    _wait(lambda: db.exists() and _has_run(db, name))
    return StoreReader(db)


def _has_run(db, name) -> bool:
    try:
        return StoreReader(db).run_by_name(name) is not None
    except Exception:  # the file may still be being created by the engine
        return False


def _last_step(reader, run_id) -> int:
    latest = reader.latest_step(run_id)
    return -1 if latest is None else latest["step"]


GOOD_EDIT = '''
def correct(example, completion):
    return {"reward": float(completion.strip() == example["answer"]), "details": {"parse_status": "ok"}}


def nonempty(example, completion):
    return 1.0 if completion.strip() else 0.0


WEIGHTS = {"correct": 1.0, "nonempty": 0.25}
'''


@pytest.mark.e2e
def test_reward_edits_apply_at_the_next_step_and_bad_ones_are_rejected(tmp_path, raw_tiny_model_dir):
    db = tmp_path / "edit.db"
    proc = _spawn_engine(tmp_path, raw_tiny_model_dir, db, "edit")
    try:
        reader = _wait_for_run(db, "edit")
        run_id = reader.run_by_name("edit")["id"]
        status = lambda cid: {c["id"]: c for c in reader.commands(run_id)}[cid]["status"]  # noqa: E731
        bad = send_command(db, run_id, "set_rewards", {"source": "def f(:\n", "weights": {}})
        _wait(lambda: status(bad) != "pending")
        good = send_command(db, run_id, "set_rewards",
                            {"source": GOOD_EDIT, "weights": {"correct": 1.0, "nonempty": 0.25}})
        _wait(lambda: status(good) != "pending")
        applied_at = _last_step(reader, run_id)
        _wait(lambda: _last_step(reader, run_id) >= applied_at + 2)
        send_command(db, run_id, "stop")
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    commands = {c["id"]: c for c in reader.commands(run_id)}
    assert commands[bad]["status"] == "rejected" and "line 1" in commands[bad]["message"]
    assert commands[good]["status"] == "applied"
    versions = reader.reward_versions(run_id)
    assert [v["version"] for v in versions] == [1, 2] and "nonempty" in versions[1]["source"]
    edit = [e for e in reader.events(run_id) if e["kind"] == "reward_edit"]
    assert len(edit) == 1 and edit[0]["payload"]["version"] == 2
    later = reader.group(reader.groups_of_step(run_id, edit[0]["step"])[0]["id"])["trajectories"]
    assert {t["reward_version"] for t in later} == {2}
    assert all("nonempty" in t["components"] for t in later)


def test_lora_run_with_kl_checkpoints_and_resumes(tmp_path, raw_tiny_model_dir):
    db = tmp_path / "lora.db"
    small = dict(model=raw_tiny_model_dir, db=db, prompts_per_step=2, group_size=4, eval_size=5,
                 lora_rank=4, beta=0.05, checkpoint_every=2, name="lora")
    first = run(RunConfig(max_steps=2, **small))
    assert first["status"] == "finished"
    checkpoint = StoreReader(db).checkpoints(first["run_id"])[-1]["path"]
    assert (Path(checkpoint) / "adapter").is_dir()  # the adapter, not a second full model
    resumed = run(RunConfig(db=db, resume="lora", max_steps=4))
    assert resumed["last_step"] == 4 and resumed["steps"] == 2
    kl = [s["kl"] for s in StoreReader(db).step_series(first["run_id"]) if s.get("kl") is not None]
    assert len(kl) == 4 and all(value >= 0 for value in kl)


# ---- resumes and ends that leave the run as it was (issue 33) -----------------------------------


def _tiny_run(db, model_dir, **kw) -> RunConfig:
    base = dict(model=model_dir, db=db, name="r", prompts_per_step=4, group_size=4, eval_size=8, eval_every=100,
                checkpoint_every=2, max_steps=2)
    return RunConfig.model_validate({**base, **kw})


def _versions_by_step(reader, run_id):
    out: dict[int, set] = {}
    for step in reader.steps(run_id):
        for group in reader.groups_of_step(run_id, step):
            full = reader.group(group["id"])
            out[step] = out.get(step, set()) | {t["reward_version"] for t in full["trajectories"]}
    return out


def test_re_run_steps_after_a_resume_use_the_reward_version_they_first_ran_with(tmp_path, raw_tiny_model_dir):
    db = tmp_path / "replay.db"
    run(_tiny_run(db, raw_tiny_model_dir))  # steps 1-2, checkpoint at 2
    lenient = "def correct(example, completion):\n    return 0.5\n\nWEIGHTS = {'correct': 1.0}\n"
    with StoreWriter(db) as writer:  # as if version 2 took over at step 4 of a run that then died at 5
        writer.write_reward_version(1, 2, lenient, {"correct": 1.0})
        writer.write_event(1, "reward_edit", {"version": 2, "weights": {"correct": 1.0}}, step=4)
    run(_tiny_run(db, raw_tiny_model_dir, name=None, resume="r", max_steps=6))
    reader = StoreReader(db)
    assert _versions_by_step(reader, 1) == {1: {1}, 2: {1}, 3: {1}, 4: {2}, 5: {2}, 6: {2}}
    [replayed] = [e for e in reader.events(1) if e["kind"] == "reward_edit" and e["payload"].get("replayed")]
    assert replayed["step"] == 4 and replayed["payload"]["version"] == 2


def test_a_version_recorded_for_a_resume_takes_over_at_the_first_resumed_step(tmp_path, raw_tiny_model_dir):
    from rlab.engine.rewards.edit.submit import submit

    db = tmp_path / "fix.db"
    run(_tiny_run(db, raw_tiny_model_dir, max_steps=3))  # checkpoints at 2 and 3
    with StoreWriter(db) as writer:  # a version that made step 3 diverge, say
        writer.write_reward_version(1, 2, "def correct(example, completion):\n    return 0.0\n\nWEIGHTS = {'correct': 1.0}\n",
                                    {"correct": 1.0})
        writer.write_event(1, "reward_edit", {"version": 2, "weights": {"correct": 1.0}}, step=3)
    fixed = tmp_path / "fixed.py"
    fixed.write_text("def correct(example, completion):\n    return 1.0\n\nWEIGHTS = {'correct': 1.0}\n")
    assert submit(db, "r", fixed).status == "for resume"
    run(_tiny_run(db, raw_tiny_model_dir, name=None, resume="r", max_steps=5))
    assert _versions_by_step(StoreReader(db), 1) == {1: {1}, 2: {1}, 3: {1}, 4: {3}, 5: {3}}  # 3: as it ran


def test_a_resume_from_before_the_first_checkpoint_repeats_the_run(tmp_path, raw_tiny_model_dir):
    db = tmp_path / "seed.db"
    run(_tiny_run(db, raw_tiny_model_dir, checkpoint_every=1000))
    with sqlite3.connect(db) as conn:  # as if it died before its first checkpoint
        first = [r[0] for r in conn.execute("SELECT completion FROM trajectories ORDER BY id")]
        conn.execute("DELETE FROM checkpoints")
    conn.close()
    torch_state_moves_on = run(_tiny_run(db, raw_tiny_model_dir, name="other"))  # noqa: F841 - uses torch's RNG
    run(_tiny_run(db, raw_tiny_model_dir, name=None, resume="r"))
    with sqlite3.connect(db) as conn:
        again = [r[0] for r in conn.execute(
            'SELECT t.completion FROM trajectories t JOIN "groups" g ON g.id = t.group_id '
            "WHERE t.run_id = 1 AND g.superseded = 0 ORDER BY t.id")]
    conn.close()
    assert again == first


@pytest.mark.e2e
def test_sigterm_stops_the_run_with_a_stop_event(tmp_path, raw_tiny_model_dir):
    db = tmp_path / "term.db"
    proc = _spawn_engine(tmp_path, raw_tiny_model_dir, db, "term")
    reader = _wait_for_run(db, "term")
    run_id = reader.run_by_name("term")["id"]
    _wait(lambda: _last_step(reader, run_id) >= 2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "SIGTERM" in err and "Traceback" not in err
    # issue 47, 6: the line said `--resume NAME` literally
    assert f"`rlab run --headless --resume term --db {db}` continues it" in err
    assert reader.run(run_id)["status"] == "stopped"
    assert [e["payload"]["reason"] for e in reader.events(run_id) if e["kind"] == "stop"] == ["SIGTERM (signal 15)"]


@pytest.mark.e2e
def test_two_resumes_of_one_run_at_once_one_takes_it_the_other_says_so(tmp_path, raw_tiny_model_dir):
    db = tmp_path / "twice.db"
    run(_tiny_run(db, raw_tiny_model_dir))
    args = [sys.executable, "-m", "rlab.engine.cli", "run", "--headless", "--db", str(db), "--resume", "r",
            "--max-steps", "100000"]
    procs = [subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    try:
        _wait(lambda: any(p.poll() is not None for p in procs))
        loser = next(p for p in procs if p.poll() is not None)
        winner = next(p for p in procs if p is not loser)
        err = loser.communicate(timeout=60)[1]
        assert loser.returncode == 2 and "Traceback" not in err, err
        assert err.strip().splitlines()[-1].startswith("rlab: error:") and "still running" in err
        assert winner.poll() is None
    finally:
        for p in procs:
            p.kill()
            p.communicate()


@pytest.mark.e2e
def test_a_headless_run_says_when_another_shell_pauses_steps_and_resumes_it(tmp_path, raw_tiny_model_dir):
    """Issue 40, 3.9 and 3.11: each command is a line on the engine's stderr, and a pause
    is recorded at the step the run row shows (the last step done), not the next one."""
    db = tmp_path / "say.db"
    proc = _spawn_engine(tmp_path, raw_tiny_model_dir, db, "say")
    try:
        reader = _wait_for_run(db, "say")
        run_id = reader.run_by_name("say")["id"]
        _wait(lambda: _last_step(reader, run_id) >= 1)
        send_command(db, run_id, "pause")
        _wait(lambda: reader.run(run_id)["status"] == "paused")
        paused_at = reader.run(run_id)["last_step"]
        send_command(db, run_id, "step")
        _wait(lambda: [e["kind"] for e in reader.events(run_id)].count("pause") == 2)
        send_command(db, run_id, "resume")
        _wait(lambda: _last_step(reader, run_id) >= paused_at + 2)
        send_command(db, run_id, "stop")
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    pause = next(e for e in reader.events(run_id) if e["kind"] == "pause")
    assert pause["step"] == paused_at
    for line in (f"rlab: paused after step {paused_at} (user)", f"rlab: resumed after step {paused_at} (single step)",
                 f"rlab: paused after step {paused_at + 1} (single step done)", "(user)", "rlab: stopping after step"):
        assert line in err, (line, err[-2000:])


BROKEN_REWARDS = "def correct(example, completion):\n    raise RuntimeError('no reward for ' + example['id'])\n"


@pytest.mark.e2e
def test_a_run_whose_every_score_fails_says_so_and_ends_failed(tmp_path, raw_tiny_model_dir):
    """Issue 47, 2: with --no-pause-on-reward-error and every call failing, the run printed
    `reward n/a`, exited 0 and ended finished as if it had trained."""
    rewards = tmp_path / "broken.py"
    rewards.write_text(BROKEN_REWARDS)
    done = _rlab("run", "--headless", "--model", raw_tiny_model_dir, "--db", tmp_path / "r.db", "--name", "b",
                 "--rewards", rewards, "--no-pause-on-reward-error", "--max-steps", "2", "--prompts-per-step", "2",
                 "--group-size", "2", "--eval-size", "2", cwd=tmp_path)
    assert done.returncode == 1 and json.loads(done.stdout.strip().splitlines()[-1])["status"] == "failed"
    assert "step 1: the reward functions failed on 4 trajectories (every one: nothing was trained)" in done.stderr
    assert "no reward for" in done.stderr and "nothing was trained; the run ends failed" in done.stderr
    with StoreReader(tmp_path / "r.db") as reader:
        assert reader.run_by_name("b")["status"] == "failed"


@pytest.mark.e2e
def test_a_reward_error_pause_says_the_reason_and_the_two_ways_on(tmp_path, raw_tiny_model_dir):
    rewards = tmp_path / "broken.py"
    rewards.write_text(BROKEN_REWARDS)
    proc = subprocess.Popen([sys.executable, "-m", "rlab.engine.cli", "run", "--headless", "--model",
                             str(raw_tiny_model_dir), "--db", str(tmp_path / "r.db"), "--name", "p", "--rewards",
                             str(rewards), "--max-steps", "3", "--prompts-per-step", "2", "--group-size", "2",
                             "--eval-size", "2"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not _paused(tmp_path / "r.db", "p"):
            time.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert "paused after step 1 (reward function error)" in err and "no reward for" in err
    assert "`rlab reward p FILE --db" in err and "`rlab resume p --db" in err


def _paused(db: Path, name: str) -> bool:
    if not db.exists():
        return False
    with StoreReader(db) as reader:
        run = reader.run_by_name(name)
    return run is not None and run["status"] == "paused"


@pytest.mark.e2e
def test_a_first_step_without_reward_spread_names_the_likely_causes(tmp_path, raw_tiny_model_dir):
    """Issue 47, 5: SmolLM2 with max_new_tokens 3 trained 3 steps at reward 0.000 with no warning."""
    done = _rlab("run", "--headless", "--model", raw_tiny_model_dir, "--db", tmp_path / "r.db", "--max-steps", "1",
                 "--prompts-per-step", "2", "--group-size", "2", "--eval-size", "2", "--max-new-tokens", "1",
                 cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "step 1: every group's trajectories got the same reward" in done.stderr
    assert "--max-new-tokens cut 100% of the completions" in done.stderr and "mean reward 0.000" in done.stderr
