"""The judge's prompt layout and answer parsing, without a server."""

import json

import pytest

from rlab.engine.rewards.judge.answer import (
    JudgeAnswerError,
    extract_json_object,
    normalize_scores,
    parse_answer,
)
from rlab.engine.rewards.judge.prompt import build_judge_messages, shared_prefix_length, validate_trajectories
from rlab.engine.rewards.judge.ruler import JudgeResult

S = {"role": "system", "content": "s"}
U = {"role": "user", "content": "u"}


def entry(k, score, explanation="why"):
    return {"trajectory_id": k, "explanation": explanation, "score": score}


def test_shared_prefix_is_capped_so_each_trajectory_keeps_a_message():
    a = [S, U, {"role": "assistant", "content": "a"}]
    b = [S, U, {"role": "assistant", "content": "b"}]
    assert shared_prefix_length([a, b]) == 2
    assert shared_prefix_length([a, a]) == 2  # identical: the last message stays tagged
    assert shared_prefix_length([a]) == 2
    assert shared_prefix_length([[S, {"role": "user", "content": "x"}], [S, U]]) == 1


def test_no_context_block_without_a_shared_prefix():
    group = [[{"role": "user", "content": "p"}], [{"role": "user", "content": "q"}]]
    system, user = build_judge_messages(group, "R", answer_in_prompt=False)
    assert "<context>" not in user["content"] and "R" in system["content"]
    assert '<trajectory id="2">\n{"role": "user", "content": "q"}\n</trajectory>' in user["content"]
    assert "JSON schema" not in user["content"]


def test_extract_takes_last_scores_object_and_ignores_other_braces():
    first = json.dumps({"scores": [entry("1", 0.1)]})
    last = json.dumps({"scores": [entry("1", 0.9)]})
    text = f"thinking {{x}} {first} then {{\"note\": 1}} final: {last} bye {{"
    assert extract_json_object(text)["scores"][0]["score"] == 0.9
    with pytest.raises(JudgeAnswerError, match="no JSON object"):
        extract_json_object('{"score": 1}')


def test_normalize_rule():
    assert normalize_scores([0.0, 1.0, 0.5]) == ([0.0, 1.0, 0.5], 1)
    assert normalize_scores([1.0, 1.0]) == ([1.0, 1.0], 1)  # ambiguous: read as 0-1
    assert normalize_scores([7, 2.5]) == ([0.7, 0.25], 10)
    assert normalize_scores([10.5, 100]) == ([0.105, 1.0], 100)
    for bad in ([-0.1, 0.5], [101, 3], [float("nan"), 0.2], [float("inf")]):
        with pytest.raises(JudgeAnswerError, match="scores must be in"):
            normalize_scores(bad)


def test_parse_rejects_duplicates_unknown_ids_and_wrong_shapes():
    ids = ["1", "2"]
    twice = json.dumps({"scores": [entry("1", 1), entry("1", 0), entry("2", 0)]})
    with pytest.raises(JudgeAnswerError, match="scored twice"):
        parse_answer(twice, ids)
    extra = json.dumps({"scores": [entry("1", 1), entry("2", 0), entry("7", 0)]})
    with pytest.raises(JudgeAnswerError, match=r"unknown: \['7'\]"):
        parse_answer(extra, ids)
    with pytest.raises(JudgeAnswerError, match="schema"):
        parse_answer('{"scores": [{"trajectory_id": "1"}]}', ids)
    with pytest.raises(JudgeAnswerError, match="no text"):
        parse_answer(None, ids)


def test_parse_accepts_integer_ids_and_padded_ids():
    text = json.dumps({"scores": [entry(2, 0.25), entry(" 1 ", 0.75)]})
    assert parse_answer(text, ["1", "2"]) == ([0.75, 0.25], ["why", "why"], 1)


def test_validate_names_the_bad_part():
    with pytest.raises(ValueError, match="empty group"):
        validate_trajectories([])
    with pytest.raises(ValueError, match="trajectory 1 must be a non-empty list"):
        validate_trajectories([[U], []])
    with pytest.raises(ValueError, match="trajectory 0, message 1"):
        validate_trajectories([[U, "hello"]])


def test_ranks_share_the_best_rank_on_ties():
    result = JudgeResult(scores=[0.5, 0.9, 0.5, 0.1], explanations=[], error=None, raw="",
                         model="m", request_hash="")
    assert result.ranks == [2, 1, 2, 4]
    failed = JudgeResult(scores=None, explanations=[], error="x", raw="", model="m",
                         request_hash="")
    assert failed.ranks is None and failed.status == "failed"


def test_settings_validate_and_build(tmp_path):
    from pydantic import ValidationError

    from rlab.engine.run.config import JudgeSettings
    from rlab.engine.rewards.judge.ruler import RulerJudge

    settings = JudgeSettings(model="qwen2.5:7b", base_url="http://localhost:11434/v1",
                             weight=0.8, on_failure="pause", price=(0.5, 1.5))
    judge = RulerJudge.from_settings(settings, "Be kind.", cache_dir=tmp_path)
    assert (judge.model, judge.base_url, judge.rubric) == ("qwen2.5:7b",
                                                           "http://localhost:11434/v1", "Be kind.")
    assert judge.prices == {"qwen2.5:7b": (0.5, 1.5)} and judge.cache.directory == tmp_path
    assert JudgeSettings.model_validate(settings.model_dump()) == settings
    for bad in ({"weight": 1.5}, {"on_failure": "ignore"}, {"max_retries": -1},
                {"api_key": "sk-x"}):
        with pytest.raises(ValidationError, match=next(iter(bad))):
            JudgeSettings(model="m", **bad)


def test_an_answer_off_the_schema_is_one_line_naming_three_problems_and_counting_the_rest():
    """Was pydantic's raw error dicts (``exc.errors()[:3]``, input values and all)."""
    text = json.dumps({"scores": [{"trajectory_id": str(i)} for i in range(5)]})
    with pytest.raises(JudgeAnswerError) as caught:
        parse_answer(text, [str(i) for i in range(5)])
    assert str(caught.value) == ("answer does not match the schema: scores.0.explanation: required; "
                                 "scores.0.score: required; scores.1.explanation: required; and 7 more")
