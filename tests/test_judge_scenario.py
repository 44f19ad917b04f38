"""The support_replies scenario: data, splits, verifier rubric, and the judge on it."""

import importlib.util
import json

import pytest
from judge_server import ChatCompletionsServer, Reply, scores_json

from rlab.engine.rewards.judge.agreement import kendall_tau, mix_rewards
from rlab.engine.rewards.judge.ruler import RulerJudge
from rlab.scenarios.support_replies import SCENARIO, load_examples


@pytest.fixture(scope="module")
def rubric():
    spec = importlib.util.spec_from_file_location("support_rewards", SCENARIO.reward_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def weighted(rubric, example, completion):
    return sum(w * getattr(rubric, name)(example, completion)["reward"]
               for name, w in rubric.WEIGHTS.items())


def test_splits_are_fixed_disjoint_and_seeded():
    everything = load_examples()
    assert len(everything) == 40
    held = SCENARIO.eval_examples()
    assert [ex["id"] for ex in held] == [ex["id"] for ex in SCENARIO.eval_examples()]
    train_a, train_b = SCENARIO.train_examples(1), SCENARIO.train_examples(2)
    assert len(held) == 10 and len(train_a) == 30
    assert {ex["id"] for ex in train_a} == {ex["id"] for ex in train_b}
    assert [ex["id"] for ex in train_a] != [ex["id"] for ex in train_b]
    assert not {ex["id"] for ex in held} & {ex["id"] for ex in train_a}
    assert SCENARIO.sft_pairs(1) == [(ex["prompt"], ex["answer"]) for ex in train_a]
    assert SCENARIO.name == "support_replies" and not SCENARIO.multi_step
    assert "Northwind Home" in SCENARIO.system_prompt


def test_bad_data_line_is_named(tmp_path):
    good = json.dumps({"id": "a", "topic": "t", "prompt": "p", "answer": "r", "keywords": []})
    path = tmp_path / "data.jsonl"
    path.write_text(good + "\n" + json.dumps({"id": "b", "prompt": "p"}) + "\n")
    with pytest.raises(ValueError) as caught:
        load_examples(path)
    # one line naming each missing field, not pydantic's multi-line report
    assert str(caught.value) == ("data.jsonl line 2 is not a valid example: "
                                 "topic: required; answer: required; keywords: required")
    path.write_text(good + "\n" + good + "\n")
    with pytest.raises(ValueError, match="repeated ids"):
        load_examples(path)


def test_weights_name_functions_and_sum_to_one(rubric):
    assert all(callable(getattr(rubric, name)) for name in rubric.WEIGHTS)
    assert sum(rubric.WEIGHTS.values()) == pytest.approx(1.0)


def test_every_reference_reply_passes_the_verifier(rubric):
    for example in load_examples():
        assert weighted(rubric, example, example["answer"]) == pytest.approx(1.0), example["id"]


def test_bad_replies_score_low(rubric):
    example = load_examples()[0]  # the cracked kettle
    rude = "NOT OUR PROBLEM. READ THE POLICY. [Your Name]"
    result = {name: getattr(rubric, name)(example, rude) for name in rubric.WEIGHTS}
    assert result["polite"]["details"]["rude"] == ["NOT OUR PROBLEM"]
    assert result["no_placeholders"]["details"]["found"] == ["[Your Name]"]
    assert result["length_ok"]["details"]["parse_status"] == "too_short"
    assert result["addresses_request"]["details"]["missing"] == ["photo", "replacement", "refund"]
    assert weighted(rubric, example, rude) < 0.15
    assert rubric.length_ok(example, "word " * 300)["reward"] == 0.0
    assert rubric.greeting_and_signoff(example, "")["details"]["parse_status"] == "empty"


async def test_judge_on_the_scenario_with_verifier_agreement(rubric, tmp_path):
    """One group end to end: prompt, judge scores, mixed reward, Kendall tau."""
    example = SCENARIO.eval_examples()[0]
    prompt = [{"role": "system", "content": SCENARIO.system_prompt},
              {"role": "user", "content": example["prompt"]}]
    replies = [example["answer"], "Whatever. Not our problem.", "Hi, we will look into it."]
    group = [prompt + [{"role": "assistant", "content": r}] for r in replies]
    answer = scores_json({"2": 0.0, "3": 0.4, "1": 0.95})
    with ChatCompletionsServer([Reply(content=answer)]) as server:
        async with RulerJudge("judge-test", base_url=server.base_url,
                              rubric=SCENARIO.judge_rubric, use_cache=False,
                              timeout_s=0.5) as judge:
            result = await judge.score_group(group)
    sent = server.requests[0]["messages"]
    assert "policy given in the system prompt" in sent[0]["content"]
    assert sent[1]["content"].count("Store policy:") == 1  # shared prefix sent once
    verifier = [weighted(rubric, example, r) for r in replies]
    assert kendall_tau(verifier, result.scores) == pytest.approx(1.0)
    mixed = mix_rewards(verifier, result.scores, 0.5)
    assert mixed[0] == pytest.approx(0.5 * verifier[0] + 0.5 * 0.95)


def test_rubric_loads_in_the_engine():
    from rlab.engine.rewards.rubric import load_rubric

    example = SCENARIO.eval_examples()[0]
    results = load_rubric(SCENARIO.reward_file).score_group(
        [example, example], [example["answer"], "Whatever."])
    assert [r.error for r in results] == [None, None]
    assert results[0].reward == pytest.approx(1.0) and results[1].reward < 0.2


def test_a_run_with_the_defaults_fits_the_thirty_training_emails(tmp_path):
    """RunConfig's 32 prompts a step were refused for 30 emails: `rlab run --scenario
    support_replies` failed at start. The scenario's run defaults count in the check."""
    from rlab.engine.cli.checks import check_options
    from rlab.engine.cli.errors import CliError
    from rlab.engine.run.config import RunConfig

    check_options(RunConfig(scenario="support_replies", db=tmp_path / "r.db"))  # raises CliError if refused
    with pytest.raises(CliError, match="has 30 training prompts; pass at most 30"):
        check_options(RunConfig(scenario="support_replies", prompts_per_step=31, db=tmp_path / "r.db"))
