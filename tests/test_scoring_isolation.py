"""User reward code runs in killable, memory-capped worker processes (issue 17).

Isolation, not a security boundary: these tests check that a hang, a huge
allocation or a stray file write stays in the worker, never that reward
code is contained against a hostile user.
"""

from __future__ import annotations

import os
import sys
import time

import pytest

from rlab.engine.rewards.child import LOG_BUDGET_BYTES
from rlab.engine.rewards.edit.check import validate
from rlab.engine.rewards.rubric import load_rubric
from rlab.engine.rewards.score_result import ScoreResult
from rlab.engine.rewards.scoring_process import ProcessRubric, ScoringProcess
from rlab.engine.rewards.success import SuccessRule

EXAMPLE = {"id": "add-2-3", "prompt": "2+3=", "answer": "5"}

RARE_HANG = '''
def correct(example, completion):
    if completion == "188":  # loops only on a rare input
        while True:
            pass
    return 1.0 if completion == example["answer"] else 0.0

WEIGHTS = {"correct": 1.0}
'''


@pytest.fixture()
def process():
    proc = ScoringProcess()
    yield proc
    proc.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_call_that_hangs_on_a_rare_input_gets_the_process_replaced(process):
    rubric = ProcessRubric(load_rubric(RARE_HANG), process)
    assert [r.reward for r in rubric.score_group([EXAMPLE] * 2, ["5", "6"])] == [1.0, 0.0]
    first = process.pid
    results = rubric.score_group([EXAMPLE] * 3, ["5", "188", "5"], timeout_s=0.5)
    assert results[0].reward == 1.0
    assert "TimeoutError" in results[1].error and results[2].error is not None  # never a silent 0
    assert process.replaced == 1 and not _alive(first)  # no thread left spinning anywhere
    started = time.perf_counter()
    assert [r.reward for r in rubric.score_group([EXAMPLE] * 2, ["5", "6"])] == [1.0, 0.0]
    assert process.pid != first and time.perf_counter() - started < 5.0


def test_a_hang_that_holds_the_gil_is_killed_by_the_wall_clock_limit(process):
    source = ('import re\ndef f(example, completion):\n'
              '    return float(bool(re.match(r"(a+)+$", "a" * 60 + "b")))\n\nWEIGHTS = {"f": 1.0}\n')
    rubric = ProcessRubric(load_rubric(source), process)
    results = rubric.score_group([EXAMPLE] * 2, ["5", "6"], timeout_s=0.25)
    assert all("no answer within" in r.error for r in results)
    assert process.replaced == 1 and process.pid is None


def test_memory_is_capped_in_scoring_and_in_the_check(process):
    source = 'def f(example, completion):\n    return float(len(bytearray(3 * 1024**3)))\n\nWEIGHTS = {"f": 1.0}\n'
    [result] = ProcessRubric(load_rubric(source), process).score_group([EXAMPLE], ["5"])
    assert "MemoryError" in result.error
    checked = validate(source, [EXAMPLE], ["5"], 5.0)
    assert not checked.ok and "MemoryError" in checked.message


def test_reward_code_runs_in_an_empty_scratch_directory(process, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    source = ('import os\ndef f(example, completion):\n    open("stray.txt", "w").write("x")\n'
              '    return float("rlab-reward-" in os.getcwd())\n\nWEIGHTS = {"f": 1.0}\n')
    [result] = ProcessRubric(load_rubric(source), process).score_group([EXAMPLE], ["5"])
    assert result.reward == 1.0 and not (tmp_path / "stray.txt").exists()


def test_pass_at_1_is_never_computed_from_errored_scores():
    ok = ScoreResult(reward=1.0, components={}, details={})
    errored = ScoreResult(reward=0.0, components={}, details={}, error="f: TimeoutError")
    pass_rate = SuccessRule().rate
    assert pass_rate([ok, ok]) == 1.0
    assert pass_rate([ok, errored]) != pass_rate([ok, errored])  # nan: no verdict


# ---- what reward code prints, and what it spawns (issue 33) --------------------------------------

LOUD = '''
import os, sys
def correct(example, completion):
    sys.stderr.write("x" * 2_000_000 + "\\n")   # 2 MB a call
    print(dict(os.environ))                     # a reward that prints the environment
    return 1.0

WEIGHTS = {"correct": 1.0}
'''

SPAWNS = '''
import subprocess, sys
CHILDREN = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"]) for _ in range(20)]
with open("pids", "w") as handle:
    handle.write(" ".join(str(c.pid) for c in CHILDREN))

def correct(example, completion):
    return 1.0

WEIGHTS = {"correct": 1.0}
'''


def test_what_reward_code_prints_reaches_the_log_bounded_and_scrubbed(monkeypatch, capfd):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0123456789abcdefghijklmn")
    from rlab.store.secrets import scrub_streams

    monkeypatch.setattr("sys.stderr", sys.stderr)  # scrub_streams wraps it; undone after the test
    scrub_streams()
    process = ScoringProcess()
    try:
        results = ProcessRubric(load_rubric(LOUD), process).score_group([EXAMPLE] * 4, ["5"] * 4)
        assert [r.reward for r in results] == [1.0] * 4
        pid = process.pid
    finally:
        process.close()
    assert pid is not None
    logged = capfd.readouterr().err
    assert len(logged) < LOG_BUDGET_BYTES + 1000  # 8 MB printed, at most the budget logged
    assert "the rest is not logged" in logged
    assert "sk-test-0123456789abcdefghijklmn" not in logged


def test_processes_a_reward_file_spawns_die_with_its_check_and_the_check_returns_at_once(tmp_path):
    started = time.perf_counter()
    result = validate(SPAWNS, [EXAMPLE], ["5"])
    assert result.ok, result.message
    assert time.perf_counter() - started < 30  # not the 110 s the parent waited on inherited pipes
    # the children lived in the check's scratch folder, which is gone with it; find them by command line
    time.sleep(0.5)
    sleepers = [line for line in os.popen("ps -eo pid,args").read().splitlines() if "time.sleep(300)" in line
                and "ps -eo" not in line]
    assert sleepers == [], sleepers


# ---- a key split across two reads of the child's output (issue 40) -------------------------------

KEY = "sk-test-0123456789abcdefghijklmn"


def test_a_key_split_across_two_reads_of_the_output_never_reaches_the_log(monkeypatch):
    """The tap reads the child's output 8 KB at a time: a key printed across that boundary
    arrives in two pieces, neither of which is a key on its own."""
    import io

    from rlab.engine.rewards.child import OutputTap
    from rlab.store.secrets import ScrubbingStream

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    printed = ("x" * (8192 - 10) + KEY + "\n") * 3
    logged = io.StringIO()
    tap = OutputTap(io.BytesIO(printed.encode()), ScrubbingStream(logged))  # the engine's log is scrubbed
    tail = tap.tail(wait_s=5.0)
    assert KEY not in logged.getvalue() and KEY[:12] not in logged.getvalue()
    assert logged.getvalue().count("REDACTED") == 3 and KEY not in tail


def test_a_key_the_reward_code_prints_or_raises_is_redacted_on_rlab_rewards_own_output(tmp_path):
    """``rlab reward`` prints what the check process printed, and its errors; its streams are not the
    engine's."""
    import subprocess

    from fixtures.smalldb import build_small_db

    db = tmp_path / "small.db"
    build_small_db(db)
    (tmp_path / "loud.py").write_text(
        'import os, sys\nsys.stderr.write("x" * 8182 + os.environ["OPENAI_API_KEY"] + "\\n")\n'
        'def exact(example, completion):\n    print("key", os.environ["OPENAI_API_KEY"], file=sys.stderr)\n'
        '    return 1.0\n\nWEIGHTS = {"exact": 1.0}\n')
    (tmp_path / "raises.py").write_text('import os\ndef exact(example, completion):\n'
                                        '    raise ValueError("bad " + os.environ["OPENAI_API_KEY"])\n\n'
                                        'WEIGHTS = {"exact": 1.0}\n')
    printed, raised = (subprocess.run(
        [sys.executable, "-P", "-m", "rlab.engine.cli", "reward", "demo", name, "--db", str(db), "--dry-run"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env={**os.environ, "OPENAI_API_KEY": KEY})
        for name in ("loud.py", "raises.py"))
    assert printed.returncode == 0, printed.stderr
    assert "key REDACTED" in printed.stderr
    assert raised.returncode == 2 and "ValueError: bad REDACTED" in raised.stderr
    for result in (printed, raised):
        assert KEY not in result.stderr + result.stdout and KEY[:12] not in result.stderr


DIES_LOUDLY = '''
import os, sys
def correct(example, completion):
    sys.stderr.write("Q" * 100_000 + "\\n")
    sys.stderr.flush()
    os._exit(1)  # the worker dies; the next batch gets a new one

WEIGHTS = {"correct": 1.0}
'''


def test_a_worker_that_dies_every_step_gets_no_fresh_log_allowance(capfd):
    """The allowance is the run's (the scoring process's owner), not each worker's: a reward that
    prints and kills its worker every step grew the log by 64 KB a step."""
    process = ScoringProcess()
    try:
        for _ in range(3):
            [result] = ProcessRubric(load_rubric(DIES_LOUDLY), process).score_group([EXAMPLE], ["5"])
            assert "died" in result.error
    finally:
        process.close()
    logged = capfd.readouterr().err
    assert 0 < logged.count("Q") <= LOG_BUDGET_BYTES
    assert logged.count("not logged") == 1
