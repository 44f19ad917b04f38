"""engine.rewards.rubric: loading reward files and scoring them safely."""

from __future__ import annotations

import math
import time
from pathlib import Path

import pytest

from rlab.engine.rewards.rubric import load_rubric
from rlab.engine.rewards.rubric_errors import RubricError
from rlab.engine.rewards.weights_source import literal_weights, replace_weights

ARITHMETIC = Path(__file__).resolve().parents[1] / "scenarios" / "arithmetic" / "rewards.py"
EXAMPLE = {"id": "e1", "prompt": "What is 2 + 3?", "answer": 5}


def score_one(rubric, completion, **kw):
    return rubric.score_group([EXAMPLE], [completion], **kw)[0]


def test_arithmetic_rubric_scores_and_keeps_parse_status():
    rubric = load_rubric(ARITHMETIC)
    assert rubric.weights == {"correct": 1.0}
    results = rubric.score_group([EXAMPLE] * 4, ["5", " 7 ", "five", ""])
    assert [r.reward for r in results] == [1.0, 0.0, 0.0, 0.0]
    assert [r.details["parse_status"] for r in results] == ["ok", "wrong", "malformed", "empty"]
    assert results[1].details["correct"]["parsed"] == 7
    assert all(r.error is None and r.step_rewards is None for r in results)


def test_sha256_and_source_identify_the_version():
    rubric = load_rubric(ARITHMETIC)
    text = ARITHMETIC.read_text()
    assert rubric.source == text
    assert rubric.sha256 == load_rubric(text).sha256
    assert rubric.sha256 != load_rubric(text + "\n# edited\n").sha256


def test_weighted_sum_of_float_and_dict_components_sync_and_async():
    rubric = load_rubric(
        "def length(example, completion):\n"
        "    return float(len(completion))\n"
        "async def exact(example, completion):\n"
        "    ok = completion == str(example['answer'])\n"
        "    return {'reward': 1.0 if ok else 0.0, 'details': {'parse_status': 'ok' if ok else 'wrong'}}\n"
        "WEIGHTS = {'length': 0.5, 'exact': 2}\n"
    )
    good, bad = rubric.score_group([EXAMPLE, EXAMPLE], ["5", "123"])
    assert good.components == {"length": 1.0, "exact": 1.0}
    assert good.reward == pytest.approx(0.5 * 1 + 2 * 1)
    assert bad.reward == pytest.approx(0.5 * 3 + 0)
    assert bad.details["parse_status"] == "wrong"
    assert bad.details["exact"] == {"parse_status": "wrong"}


def test_step_rewards_are_weighted_and_must_agree_on_turns():
    rubric = load_rubric(
        "def a(example, completion):\n"
        "    return {'reward': 1.0, 'step_rewards': [0.0, 1.0]}\n"
        "def b(example, completion):\n"
        "    return {'reward': 0.0, 'step_rewards': [1.0, 1.0]}\n"
        "WEIGHTS = {'a': 1.0, 'b': 0.5}\n"
    )
    assert score_one(rubric, "x").step_rewards == [0.5, 1.5]
    mismatched = load_rubric(
        "def a(example, completion):\n    return {'reward': 1.0, 'step_rewards': [0.0]}\n"
        "def b(example, completion):\n    return {'reward': 1.0, 'step_rewards': [1.0, 1.0]}\n"
        "WEIGHTS = {'a': 1.0, 'b': 1.0}\n"
    )
    result = score_one(mismatched, "x")
    assert result.reward == 0.0 and "disagree on the number of turns" in result.error


def test_exception_gives_zero_total_with_function_and_line():
    rubric = load_rubric(
        "def fine(example, completion):\n"
        "    return 1.0\n"
        "def broken(example, completion):\n"
        "    table = {}\n"
        "    return table[completion]\n"
        "WEIGHTS = {'fine': 1.0, 'broken': 1.0}\n",
        filename="my_rewards.py",
    )
    result = score_one(rubric, "5")
    assert result.reward == 0.0  # no partial sum when any function fails
    assert result.components == {"fine": 1.0, "broken": 0.0}
    assert result.error == "broken: KeyError: '5' (my_rewards.py line 5)"
    assert result.details["error_kind"] == "exception" and result.details["error_line"] == 5
    assert result.details["broken"]["error"] == result.error


@pytest.mark.parametrize(
    "returned, problem",
    [("'abc'", "a str, not a number"), ("float('nan')", "not finite"), ("float('inf')", "not finite"),
     ("True", "a bool, not a number"), ("{'details': {}}", "without 'reward'"),
     ("{'reward': 1.0, 'step_rewards': [float('nan')]}", "step_rewards[0]")],
)
def test_non_numeric_or_non_finite_reward_is_an_error(returned, problem):
    rubric = load_rubric(f"def f(example, completion):\n    return {returned}\nWEIGHTS = {{'f': 1.0}}\n")
    result = score_one(rubric, "5")
    assert result.reward == 0.0
    assert problem in result.error and "rewards.py line 1" in result.error
    assert result.details["error_kind"] == "bad_reward"


def test_hung_sync_function_times_out_then_is_scored_as_error_at_once():
    rubric = load_rubric(
        "import time\n"
        "def ok(example, completion):\n"
        "    return 1.0\n"
        "def slow(example, completion):\n"
        "    if completion == 'hang':\n"
        "        time.sleep(2.0)  # long past the limit; then the abandoned thread ends\n"
        "    return 1.0\n"
        "WEIGHTS = {'ok': 1.0, 'slow': 1.0}\n"
    )
    start = time.monotonic()
    results = rubric.score_group([EXAMPLE] * 3, ["a", "hang", "b"], timeout_s=0.3)
    assert 0.3 <= time.monotonic() - start < 2.0
    assert [r.reward for r in results] == [2.0, 0.0, 0.0]
    assert results[1].error.startswith("slow: TimeoutError: no answer after 0.3 s (rewards.py line")
    assert results[1].details["error_line"] == 6
    assert "hung earlier" in results[2].error
    assert rubric.hung == {"slow"}
    start = time.monotonic()
    again = rubric.score_group([EXAMPLE], ["c"], timeout_s=0.3)[0]
    # not waiting for the abandoned thread (asleep for another ~1.6 s): well under that, with room
    # for a loaded machine (0.62 s seen under a full test run)
    assert time.monotonic() - start < 1.0 and "hung earlier" in again.error
    # a copy with other weights runs the same code: still hung
    assert "hung earlier" in score_one(rubric.with_weights({"ok": 1.0, "slow": 2.0}), "c").error


async def test_async_function_past_the_limit_is_cancelled():
    rubric = load_rubric(
        "import asyncio\n"
        "async def slow(example, completion):\n"
        "    await asyncio.sleep(5 if completion == 'slow' else 0)\n"
        "    return 1.0\n"
        "WEIGHTS = {'slow': 1.0}\n"
    )
    start = time.monotonic()
    fast, slow = rubric.score_group([EXAMPLE] * 2, ["fast", "slow"], timeout_s=0.3)
    assert time.monotonic() - start < 2.0  # gathered, not 5 s
    assert fast.reward == 1.0 and slow.reward == 0.0
    assert "TimeoutError" in slow.error
    assert not rubric.hung  # cancelled cleanly, so not marked hung


def test_async_function_that_blocks_the_loop_is_abandoned_and_marked_hung():
    rubric = load_rubric(
        "import time\n"
        "async def blocking(example, completion):\n"
        "    time.sleep(2.0)  # blocks instead of awaiting\n"
        "    return 1.0\n"
        "WEIGHTS = {'blocking': 1.0}\n"
    )
    start = time.monotonic()
    result = score_one(rubric, "x", timeout_s=0.3)
    assert time.monotonic() - start < 1.9
    assert result.reward == 0.0
    assert result.error == "blocking: TimeoutError: blocked the event loop for over 0.3 s (rewards.py line 3)"
    assert rubric.hung == {"blocking"}


def test_with_weights_changes_the_total_and_checks_names():
    rubric = load_rubric(
        "def a(example, completion):\n    return 1.0\n"
        "def b(example, completion):\n    return 2.0\n"
        "WEIGHTS = {'a': 1.0, 'b': 1.0}\n"
    )
    heavier = rubric.with_weights({"a": 3.0, "b": 0.0})
    assert score_one(heavier, "x").reward == 3.0
    assert score_one(rubric, "x").reward == 3.0  # the original is unchanged: 1 + 2
    with pytest.raises(RubricError, match="unknown \\['c'\\]"):
        rubric.with_weights({"a": 1.0, "c": 1.0})
    with pytest.raises(RubricError, match="finite number"):
        rubric.with_weights({"a": 1.0, "b": math.inf})


@pytest.mark.parametrize(
    "source, kind, line, text",
    [
        ("def f(example, completion)\n    return 1\nWEIGHTS = {'f': 1}\n", "syntax", 1, "SyntaxError in rewards.py line 1"),
        ("import not_a_module_xyz\n", "import", 1, "No module named 'not_a_module_xyz'"),
        ("x = 1\ny = x / 0\n", "exception", 2, "ZeroDivisionError in rewards.py line 2 while loading"),
        ("x = 1\n", "weights", None, "defines no reward functions and no WEIGHTS"),
        ("def f(example, completion):\n    return 1\nWEIGHTS = {'g': 1}\n", "weights", 3, "names 'g', which is not defined"),
        ("f = 3\nWEIGHTS = {'f': 1}\n", "weights", 2, "names 'f', which is a int"),
        ("def f(example, completion):\n    return 1\nWEIGHTS = {'f': float('nan')}\n", "weights", 3, "finite number"),
        ("def f(example, completion):\n    return 1\nWEIGHTS = [1]\n", "weights", 3, "non-empty dict"),
        ("def f(x, y, z):\n    return 1\nWEIGHTS = {'f': 1}\n", "signature", 1, "has no reward-function signature"),
        ("import sys\nsys.exit(2)\n", "exception", 2, "SystemExit"),
    ],
)
def test_bad_reward_files_raise_a_clear_rubric_error(source, kind, line, text):
    with pytest.raises(RubricError) as info:
        load_rubric(source)
    assert info.value.kind == kind
    assert info.value.lineno == line
    assert text in str(info.value)


def test_bad_arguments_are_rejected():
    rubric = load_rubric(ARITHMETIC)
    with pytest.raises(ValueError, match="one example per completion"):
        rubric.score_group([EXAMPLE], ["1", "2"])
    with pytest.raises(ValueError, match="positive number of seconds"):
        rubric.score_group([EXAMPLE], ["1"], timeout_s=0)


def test_literal_weights_and_replace_weights_edit_only_the_weights():
    text = ARITHMETIC.read_text()
    assert literal_weights(text) == {"correct": 1.0}
    edited = replace_weights(text, {"correct": 2.5})
    assert edited.replace('WEIGHTS = {"correct": 2.5}', 'WEIGHTS = {"correct": 1.0}') == text
    assert load_rubric(edited).weights == {"correct": 2.5}
    multi_line = "# é\nWEIGHTS: dict = {\n    'a': 1,\n}  # kept\ndef a(example, completion):\n    return 1.0\n"
    assert replace_weights(multi_line, {"a": 0.5}) == (
        '# é\nWEIGHTS: dict = {"a": 0.5}  # kept\ndef a(example, completion):\n    return 1.0\n'
    )
    assert literal_weights("WEIGHTS = dict(a=1)\n") is None
    assert literal_weights("def broken(:\n") is None
    assert replace_weights("def a(example, completion):\n    return 1\n", {"a": 0.5}).endswith(
        '\nWEIGHTS = {"a": 0.5}\n')  # WEIGHTS is optional: the first weight edit adds it
    with pytest.raises(RubricError, match="does not parse"):
        replace_weights("def a(:\n", {"a": 1.0})
    with pytest.raises(RubricError, match="finite number"):
        replace_weights(text, {"correct": float("nan")})


def test_reward_file_may_use_dataclasses_with_postponed_annotations():
    rubric = load_rubric(
        "from __future__ import annotations\n"
        "from dataclasses import dataclass\n"
        "@dataclass\n"
        "class Verdict:\n"
        "    reward: float\n"
        "def f(example, completion):\n"
        "    return Verdict(reward=0.5).reward\n"
        "WEIGHTS = {'f': 2.0}\n"
    )
    assert score_one(rubric, "x").reward == 1.0


def test_a_str_path_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="pass pathlib.Path"):
        load_rubric(str(ARITHMETIC))
