"""User reward code runs in killable, memory-capped worker processes (issue 17).

Isolation, not a security boundary: these tests check that a hang, a huge
allocation or a stray file write stays in the worker, never that reward
code is contained against a hostile user.
"""

from __future__ import annotations

import os
import time

import pytest

from rlab.engine.rewards.edit.check import validate
from rlab.engine.rewards.rubric import ScoreResult, load_rubric
from rlab.engine.rewards.scoring_process import ProcessRubric, ScoringProcess
from rlab.engine.success import SuccessRule

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
