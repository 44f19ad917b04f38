"""Reward functions in the three styles (lab, TRL, verifiers) score through one rubric."""

from __future__ import annotations

import pytest

from rlab.engine.rewards.rubric import load_rubric
from rlab.engine.rewards.rubric_errors import RubricError
from rlab.engine.rewards.signatures import COMPLETION_IDS_KEY, detect_style, style_of, styles_in_source

EXAMPLE = {"id": "q7", "prompt": "2+2=", "answer": "4", "level": 3}


def test_styles_are_detected_from_parameter_names():
    def lab(example, completion): ...
    def lab_other_names(ex, text): ...
    def trl(completions, **kwargs): ...
    def trl_named(prompts, completions, answer, **kwargs): ...
    def vf(completion, answer): ...
    def vf_kwargs(completion, info, state, **kwargs): ...
    async def vf_async(completion, answer, **kwargs): ...
    def helper(text): ...
    def three(a, b, c): ...

    found = {f.__name__: detect_style(f) for f in
             (lab, lab_other_names, trl, trl_named, vf, vf_kwargs, vf_async, helper, three)}
    assert found == {"lab": "lab", "lab_other_names": "lab", "trl": "trl", "trl_named": "trl", "vf": "verifiers",
                     "vf_kwargs": "verifiers", "vf_async": "verifiers", "helper": None, "three": None}


TRL_FILE = '''
def exact(completions, answer, **kwargs):
    return [1.0 if c.strip() == a else 0.0 for c, a in zip(completions, answer)]

def only_hard(completions, level, **kwargs):
    # TRL's "does not apply": None is left out of the weighted sum
    return [0.5 if lv >= 5 else None for lv in level]

def saw(prompts, completions, completion_ids, **kwargs):
    return [float(p == "2+2=" and len(ids) == 2) for p, ids in zip(prompts, completion_ids)]

WEIGHTS = {"exact": 1.0, "only_hard": 2.0}
'''


def test_trl_style_gets_columns_prompts_ids_and_none_adds_nothing():
    rubric = load_rubric(TRL_FILE)
    assert list(rubric.weights) == ["exact", "only_hard", "saw"]  # saw is not in WEIGHTS: weight 1.0
    assert rubric.weights["saw"] == 1.0
    example = {**EXAMPLE, COMPLETION_IDS_KEY: [11, 12]}
    hard = {**EXAMPLE, "level": 7}
    right, wrong, hard_right = rubric.score_group([example, example, {**hard, COMPLETION_IDS_KEY: [9]}],
                                                  ["4", "5", "4"])
    assert right.error is None and right.components == {"exact": 1.0, "only_hard": 0.0, "saw": 1.0}
    assert right.details["only_hard"] == {"applies": False}
    assert right.reward == pytest.approx(2.0)  # 1*1 + 2*(not applicable) + 1*1
    assert wrong.reward == pytest.approx(1.0) and wrong.components["exact"] == 0.0
    assert hard_right.reward == pytest.approx(1.0 + 2 * 0.5 + 0.0)
    assert {n: style_of(f) for n, f in rubric.functions.items()} == {"exact": "trl", "only_hard": "trl", "saw": "trl"}


def test_trl_conversational_prompt_gives_conversational_completions():
    rubric = load_rubric(
        "def f(prompts, completions, **kw):\n"
        "    return [float(c[0]['role'] == 'assistant' and p[-1]['content'] == 'hi') for p, c in zip(prompts, completions)]\n")
    example = {"id": 1, "prompt": [{"role": "user", "content": "hi"}], "answer": ""}
    assert rubric.score_group([example], ["hello"])[0].reward == 1.0


def test_verifiers_style_sync_and_async_with_any_subset_of_names():
    rubric = load_rubric(
        "import asyncio\n"
        "def correct(completion, answer):\n"
        "    return float(completion.strip() == answer)\n"
        "async def level_bonus(completion, info, state, **kwargs):\n"
        "    await asyncio.sleep(0)\n"
        "    return 0.1 * kwargs['level'] if state['completion'] == completion else -1.0\n"
        "WEIGHTS = {'correct': 1.0}\n")
    result = rubric.score_group([EXAMPLE], ["4"])[0]
    assert result.error is None
    assert result.components == {"correct": 1.0, "level_bonus": pytest.approx(0.3)}
    assert {n: style_of(f) for n, f in rubric.functions.items()} == {"correct": "verifiers", "level_bonus": "verifiers"}


def test_lab_functions_are_not_wrapped_and_helpers_are_not_rewards():
    source = ("def _parse(text):\n    return text.strip()\n"
              "def extract_digits(text):\n    return text\n"
              "def correct(example, completion):\n    return float(_parse(completion) == example['answer'])\n")
    rubric = load_rubric(source)
    assert list(rubric.functions) == ["correct"]
    assert rubric.functions["correct"].__code__.co_filename == "rewards.py"


@pytest.mark.parametrize("body, message", [
    ("    return [1.0, 0.0]\n", "returned 2 rewards for 1 completion"),
    ("    return 1.0\n", "returns a list with one float"),
    ("    return [float('nan')]\n", "not finite"),
    ("    x = 1 / 0\n    return [x]\n", "ZeroDivisionError: division by zero (rewards.py line 2)"),
])
def test_trl_errors_name_the_function_and_the_line(body, message):
    rubric = load_rubric("def bad(completions, **kwargs):\n" + body)
    result = rubric.score_group([EXAMPLE], ["4"])[0]
    assert result.reward == 0.0
    assert result.error.startswith("bad: ") and message in result.error


def test_a_function_with_no_known_signature_is_a_clear_error():
    with pytest.raises(RubricError, match=r"f in rewards.py line 1 has no reward-function signature.*TRL's"):
        load_rubric("def f(x, y, z):\n    return 1\nWEIGHTS = {'f': 1.0}\n")


def test_styles_read_from_source_match_the_loaded_functions():
    source = TRL_FILE + ("def vf(completion, answer, **kw):\n    return 1.0\n"
                         "async def lab(example, completion):\n    return 1.0\n"
                         "def helper(text):\n    return text\n")
    from_source = styles_in_source(source)
    loaded = {n: style_of(f) for n, f in load_rubric(source).functions.items()}
    assert from_source == loaded == {"exact": "trl", "only_hard": "trl", "saw": "trl", "vf": "verifiers", "lab": "lab"}
    assert styles_in_source("def broken(:\n") == {}
