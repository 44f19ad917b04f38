"""``rlab reward RUN FILE``: check, dry run printed, set_rewards sent; rejections exit non-zero."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest
from fixtures.smalldb import build_small_db

from rlab.store.reader import StoreReader

ONE_NUMBER = '''
def exact(example, completion):
    return 1.0 if completion.strip() == example["answer"] else 0.0

WEIGHTS = {"exact": 1.0}
'''
RAISES = "def f(example, completion):\n    raise KeyError('answer')\n\nWEIGHTS = {'f': 1.0}\n"


def _rlab(*args, cwd):
    return subprocess.run([sys.executable, "-P", "-m", "rlab.engine.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture()
def small(tmp_path):
    db = tmp_path / "small.db"
    build_small_db(db)
    (tmp_path / "good.py").write_text(ONE_NUMBER)
    (tmp_path / "bad.py").write_text(RAISES)
    return db


def test_dry_run_prints_the_per_group_and_per_trajectory_changes_and_sends_nothing(small, tmp_path):
    result = _rlab("reward", "demo", "good.py", "--db", str(small), "--dry-run", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "is valid" in result.stdout and "dry run on the last 8 groups: mean reward" in result.stdout
    assert "group 0: mean" in result.stdout and "trajectory" in result.stdout
    assert StoreReader(small).commands(1) == []


def test_a_rejected_edit_exits_non_zero_with_the_reason_and_sends_nothing(small, tmp_path):
    result = _rlab("reward", "demo", "bad.py", "--db", str(small), cwd=tmp_path)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rlab: error: bad.py not applied: f: KeyError")
    assert "line 2" in lines[0] and StoreReader(small).commands(1) == []


def test_a_rejected_edit_names_the_file_the_user_passed_not_the_runs_copy(small, tmp_path):
    """Issue 40, 3.14: the line an error points at is in the file given, so the message names that file."""
    result = _rlab("reward", "demo", "bad.py", "--db", str(small), cwd=tmp_path)
    assert "(bad.py line 2)" in result.stderr and "rewards.py" not in result.stderr, result.stderr


def test_apply_sends_the_checked_version_and_reports_it_queued_when_no_engine_answers(small, tmp_path):
    result = _rlab("reward", "demo", "good.py", "--db", str(small), "--wait", "0.5", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "queued (command" in result.stdout
    [command] = StoreReader(small).commands(1)
    assert command["kind"] == "set_rewards" and command["status"] == "pending"
    assert command["payload"] == {"source": ONE_NUMBER, "weights": {"exact": 1.0}, "filename": "good.py"}


def test_a_run_that_is_not_running_records_the_edit_for_its_resume(small, tmp_path):
    """The way out of a version that made a run fail (issue 33): the fix waits for --resume."""
    with sqlite3.connect(small) as conn:
        conn.execute("UPDATE runs SET status = 'failed' WHERE name = 'demo'")
    conn.close()
    result = _rlab("reward", "demo", "good.py", "--db", str(small), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "is failed: recorded as reward version 3" in result.stdout and "--resume demo" in result.stdout
    reader = StoreReader(small)
    run_id = reader.run_by_name("demo")["id"]
    assert reader.reward_versions(run_id)[-1]["source"] == ONE_NUMBER
    [edit] = [e for e in reader.events(run_id) if e["kind"] == "reward_edit" and e["payload"].get("for_resume")]
    assert edit["payload"]["for_resume"] and edit["payload"]["version"] == 3  # the demo has versions 1 and 2
    assert not reader.commands(run_id)  # nothing was sent: no engine reads commands for it


def test_an_edit_that_drops_the_success_function_is_refused_with_advice_for_an_edit(small, tmp_path):
    """`rlab reward` takes no --success: its refusal says to keep the run's
    success function, not to name another one with a flag it does not have."""
    from fixtures.smalldb import MANIFEST, REWARD_FILE
    from rlab.store.writer import StoreWriter

    with StoreWriter(small) as writer:
        writer.start_run("judged", "arithmetic", {"reward_file": str(REWARD_FILE), "success": "correct"},
                         MANIFEST, reward_file=REWARD_FILE)
    result = _rlab("reward", "judged", "good.py", "--db", str(small), cwd=tmp_path)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("rlab: error: good.py not applied: success = 'correct' is not a reward function")
    assert "keep correct in WEIGHTS" in line and "--success" not in line, line


@pytest.mark.e2e
def test_a_reward_file_that_hangs_is_one_line_without_a_stack_of_ours(small, tmp_path):
    """Issue 47, 6: `rlab reward RUN hang.py` printed faulthandler's stack of the check's internals
    before its one line."""
    # at import, where only faulthandler's watchdog (its stack dumped on stderr) can stop it
    (tmp_path / "hang.py").write_text("import time\nwhile True:\n    time.sleep(0.01)\n")
    result = _rlab("reward", "demo", "hang.py", "--db", str(small), cwd=tmp_path)
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1, result.stderr
    assert lines[0].startswith("rlab: error: hang.py not applied") and "line 3" in lines[0], lines[0]


def test_a_reward_file_that_is_not_there_is_one_line_with_the_fix(small, tmp_path):
    """A newcomer's `rlab reward hack /nonexistent.py` printed a raw `[Errno 2]` line."""
    result = _rlab("reward", "demo", "/nonexistent.py", "--db", str(small), cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "cannot read the reward file /nonexistent.py (No such file or directory)" in result.stderr
    assert "rlab_runs/<run file>/<run>/rewards.py" in result.stderr and "Errno" not in result.stderr
