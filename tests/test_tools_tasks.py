"""Tool tasks end to end (issue 45): the built-in calculator, a task folder with tools, a
verifiers ToolEnv; rollouts, scores, GiGPO anchors and the judge's view of the calls."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rlab.engine.alerts import GroupStats
from rlab.engine.alerts import AlertWatch
from rlab.engine.run.config import RunConfig
from rlab.engine.rewards.judge.prompt import build_judge_messages
from rlab.engine.rewards.rubric import load_rubric
from rlab.engine.rewards.scoring import score, scorer_examples
from rlab.engine.rollout.play import Rollout
from rlab.engine.rewards.success import SuccessRule
from rlab.engine.tools.calls import call_text
from rlab.engine.train.advantages import rollout_advantages
from rlab.engine.types import Sample, ToolScenario
from rlab.scenarios import get_scenario
from rlab.scenarios.calculator import SCENARIO as CALCULATOR
from rlab.scenarios.task_scenario import TaskError

OPERANDS = re.compile(r"What is (\d+) ([*+]) (\d+)\?")


class ScriptedAgent:
    """A sampler that renders conversations as text and plays ``act(text) -> reply``."""

    def __init__(self, act):
        self.act = act
        self.tools_seen: list = []

    def render(self, messages, tools=None):
        self.tools_seen.append(tools)
        return [ord(c) for c in json.dumps(messages)]

    def sample(self, prompt_ids, *, max_new_tokens, temperature, cache=None):
        out = []
        for prompt in prompt_ids:
            text = self.act(json.loads("".join(map(chr, prompt))))
            out.append(Sample([ord(c) for c in text], text, [-0.1] * len(text), False))
        return out


def calculator_agent(wrong_every: int = 0):
    """Calls the right tool with the question's operands, then answers with its result
    (every ``wrong_every``-th episode answers before calling, with a wrong number)."""
    count = [0]

    def act(messages):
        if messages[-1]["role"] == "tool":
            return messages[-1]["content"]
        count[0] += 1
        if wrong_every and count[0] % wrong_every == 0:
            return "12345"
        a, op, b = OPERANDS.search(messages[-1]["content"]).groups()
        return call_text("multiply" if op == "*" else "add", {"a": int(a), "b": int(b)})

    return act


def test_the_calculator_is_a_tool_scenario_with_held_out_questions_it_cannot_guess():
    assert isinstance(CALCULATOR, ToolScenario) and get_scenario("calculator") is CALCULATOR
    held = {ex["id"] for ex in CALCULATOR.eval_examples()}
    assert len(held) == 128 and not held & {ex["id"] for ex in CALCULATOR.train_examples(0)}
    transcripts = CALCULATOR.sft_transcripts(0)
    first_turns = [t[1] for t in transcripts if t[1].get("train", True)]
    share = np.mean([bool(m.get("tool_calls")) for m in first_turns])
    assert 0.25 < share < 0.45  # the warm start calls now and then (TOOL_SHARE), so greedy answers without a call


def test_a_calculator_group_plays_scores_and_gets_advantages():
    agent = ScriptedAgent(calculator_agent(wrong_every=3))
    config = RunConfig(scenario="calculator", group_size=3, max_new_tokens=96)
    rollout = Rollout(agent, CALCULATOR, config)
    try:
        rollouts = rollout.play(CALCULATOR.eval_examples()[:2])
    finally:
        rollout.close()
    assert rollouts.multi_step and all(t is not None and t[0]["function"]["name"] == "add" for t in agent.tools_seen)
    solved, guessed = rollouts.groups[0][0], rollouts.groups[0][2]
    assert [m["role"] for m in solved.messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert solved.tools and len(solved.tool_calls) == 1 and solved.tool_calls[0].error is None
    assert guessed.tool_calls == [] and len(guessed.turns) == 1
    rubric = load_rubric(CALCULATOR.reward_file)
    scored = score(rollouts, rubric)
    assert scored.rewards[0].tolist() == [1.0, 1.0, 0.0]
    examples = scorer_examples(rollouts)
    assert examples[0]["_tool_calls"][0][0]["name"] == solved.tool_calls[0].name
    advantages = rollout_advantages(rollouts, scored.rewards, np.zeros(2, dtype=bool), method="gigpo",
                                    turn_rewards=scored.turn_rewards)
    # the two solved episodes made the same call: one anchor state after their first turn
    assert solved.turns[1].state_key == rollouts.groups[0][1].turns[1].state_key
    assert advantages.gigpo.anchor_size[0][1] == 2


def _played_with(rubric_file: Path):
    """Eight questions x 4 episodes, scored with ``rubric_file``: a question's episodes call and
    answer right, call and answer wrong, answer wrong without a call, or call twice and answer
    right; the watch's view of each group (successes by ``correct``)."""
    examples = CALCULATOR.eval_examples()[:8]
    kind = {ex["prompt"]: k % 4 for k, ex in enumerate(examples)}

    def act(messages):
        asked = kind[messages[1]["content"]]
        results = [m["content"] for m in messages if m["role"] == "tool"]
        a, op, b = OPERANDS.search(messages[1]["content"]).groups()
        if asked == 2 or (results and (asked != 3 or len(results) == 2)):
            return results[-1] if asked in (0, 3) else "12345"
        return call_text("multiply", {"a": int(a), "b": int(b)})

    rollout = Rollout(ScriptedAgent(act), CALCULATOR, RunConfig(scenario="calculator", group_size=4))
    try:
        rollouts = rollout.play(examples)
    finally:
        rollout.close()
    scored = score(rollouts, load_rubric(rubric_file))
    rule = SuccessRule("correct")
    return [GroupStats(1, p, scored.rewards[p].tolist(), [t.messages[-1]["content"] for t in group],
                       successes=[rule.passed(s) for s in scored.scores[4 * p:4 * p + 4]],
                       tool_calls=[len(t.tool_calls) for t in group], tool_errors=[0] * 4, looped=[False] * 4)
            for p, group in enumerate(rollouts.groups)]


def test_tool_paid_names_the_calculator_s_pay_per_call_rubric_and_not_its_fix():
    folder = Path(CALCULATOR.reward_file).parent
    holed = _played_with(folder / "rewards_pay_per_call.py")
    assert [g.tool_calls for g in holed[:4]] == [[1] * 4, [1] * 4, [0] * 4, [2] * 4]
    assert [g.rewards[0] for g in holed[:4]] == [2.0, 1.0, 0.0, 3.0]  # the hole: a wrong answer with a call earns 1
    [alert] = [a for a in AlertWatch(reward_scale=2.0).observe(1, {}, holed) if a.kind == "tool_paid"]
    assert alert.value == pytest.approx(0.5) and alert.group_ids[:2] == (1, 5)  # the paid failures first
    fixed = _played_with(folder / "rewards.py")
    assert [g.rewards[0] for g in fixed[:4]] == [1.0, 0.0, 0.0, 1.0]
    assert not [a for a in AlertWatch().observe(1, {}, fixed) if a.kind == "tool_paid"]


def test_a_failed_call_costs_on_the_turn_that_made_it():
    replies = iter([call_text("multiply", {"a": "x", "b": 2}), call_text("multiply", {"a": 3, "b": 2}), "6"])
    rollout = Rollout(ScriptedAgent(lambda _: next(replies)), CALCULATOR, RunConfig(group_size=2))
    example = {"id": "m", "prompt": "What is 3 * 2?", "answer": "6"}
    try:
        trajectory = rollout.play([example], group_size=1).groups[0][0]
    finally:
        rollout.close()
    [scored] = load_rubric(CALCULATOR.reward_file).score_group(
        [{**example, "_tool_calls": [[{"error": c.error} for c in t.tool_calls] for t in trajectory.turns]}],
        [trajectory.messages])
    assert scored.components == {"correct": 1.0, "tool_errors": -1.0}
    assert scored.reward == pytest.approx(0.9) and scored.step_rewards == pytest.approx([-0.1, 0.0, 0.0])


def test_without_tools_the_same_task_offers_none():
    agent = ScriptedAgent(calculator_agent())
    rollout = Rollout(agent, CALCULATOR, RunConfig(tools=False, group_size=2))
    assert rollout.tools is None
    trajectory = rollout.play(CALCULATOR.eval_examples()[:1], group_size=1).groups[0][0]
    assert agent.tools_seen[0] is None and trajectory.tool_calls[0].error.startswith("no tools are offered")


def test_the_judge_sees_the_calls_and_their_results():
    rollout = Rollout(ScriptedAgent(calculator_agent()), CALCULATOR, RunConfig(group_size=2))
    try:
        group = rollout.play(CALCULATOR.eval_examples()[:1]).groups[0]
    finally:
        rollout.close()
    prompt = build_judge_messages([t.messages for t in group], "rubric", answer_in_prompt=False)[1]["content"]
    name = group[0].tool_calls[0].name
    assert '"tool_calls"' in prompt and '"role": "tool"' in prompt and f'"name": "{name}"' in prompt


# -- a task folder with tools ---------------------------------------------------------------------

TOOLS = '''
PRICES = {"lamp": 23, "mug": 7}


def price(item: str) -> int:
    """The price of an item.

    Args:
        item: the item's name
    """
    return PRICES[item]


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: the first factor
        b: the second factor
    """
    return a * b
'''


def _task(tmp_path: Path, **keys: str) -> Path:
    (tmp_path / "tools.py").write_text(TOOLS)
    (tmp_path / "rewards.py").write_text("def correct(example, completion):\n"
                                         "    return float(completion[-1]['content'] == example['answer'])\n")
    rows = [{"id": f"q{i}", "prompt": f"How much do {i} lamps cost?", "answer": str(23 * i)} for i in range(2, 9)]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = [f'{k} = "{v}"' for k, v in {"train": "train.jsonl", "rewards": "rewards.py", "tools": "tools.py",
                                          **keys}.items()]
    (tmp_path / "task.toml").write_text("\n".join(lines + ["max_turns = 3"]) + "\n")
    return tmp_path


def test_a_task_folder_with_tools_is_a_tool_task(tmp_path):
    task = get_scenario(str(_task(tmp_path)))
    assert isinstance(task, ToolScenario) and task.multi_step and task.max_turns == 3
    with pytest.raises(TaskError, match="transcripts"):
        task.sft_transcripts(0)
    (tmp_path / "env.py").write_text("class E: pass\n")
    with pytest.raises(TaskError, match="tools or an env, not both"):
        get_scenario(str(_task(tmp_path, env="env.py:E")))


def test_a_task_folder_s_transcripts_warm_start_its_tiny_policy(tmp_path):
    from rlab.engine.policy.tiny import build_tokenizer
    call = {"id": "c", "type": "function", "function": {"name": "price", "arguments": json.dumps({"item": "lamp"})}}
    transcript = [{"role": "user", "content": "How much is a lamp?"},
                  {"role": "assistant", "content": "", "tool_calls": [call]},
                  {"role": "tool", "tool_call_id": "c", "name": "price", "content": "23"},
                  {"role": "assistant", "content": "23"}]
    (tmp_path / "transcripts.jsonl").write_text(json.dumps({"messages": transcript}) + "\n" +
                                                json.dumps({"messages": transcript[:1] + [
                                                    {"role": "assistant", "content": "40"}]}) + "\n")
    task = get_scenario(str(_task(tmp_path, transcripts="transcripts.jsonl")))
    assert len(task.sft_transcripts(0)) == 2
    pairs = _text_pairs(task, _tiny_policy(build_tokenizer))
    completions = sorted(c for _, c in pairs)
    assert completions == ["23", "40", call_text("price", {"item": "lamp"})]
    assert all(context.startswith("tools: price(item), multiply(a, b)\nHow much is a lamp?\n") for context, _ in pairs)


def _text_pairs(task, policy) -> list[tuple[str, str]]:
    """The task's warm-start pairs as the tiny policy reads them: (context, completion without its EOS)."""
    from rlab.engine.train.sft import transcript_pairs
    from rlab.engine.train.warm_start import tool_schemas

    pairs = transcript_pairs(policy, task.sft_transcripts(0), task.system_prompt, tool_schemas(task))
    assert all(p.completion[-1] == policy.eos_id for p in pairs)
    return [(policy.tokenizer.decode(p.context), policy.tokenizer.decode(p.completion[:-1])) for p in pairs]


def test_a_tool_task_s_build_says_whether_its_policy_calls_its_tools(tmp_path, monkeypatch, capsys):
    """Issue 59, item 3: the build's last lines said only "ready after N steps"; they now say
    whether the policy calls its tools, and warn with the fix when it does not (two steps of
    warm start cannot teach it)."""
    from rlab.engine.train.warm_start import ensure_tiny_model

    monkeypatch.setenv("RLAB_CACHE_DIR", str(tmp_path / "cache"))
    call = {"id": "c", "type": "function", "function": {"name": "price", "arguments": json.dumps({"item": "lamp"})}}
    transcript = [{"role": "user", "content": "How much is a lamp?"},
                  {"role": "assistant", "content": "", "tool_calls": [call]},
                  {"role": "tool", "tool_call_id": "c", "name": "price", "content": "23"},
                  {"role": "assistant", "content": "23"}]
    (tmp_path / "transcripts.jsonl").write_text(json.dumps({"messages": transcript}) + "\n")
    # a scenario is frozen: a copy with a two-step warm start
    task = replace(get_scenario(str(_task(tmp_path, transcripts="transcripts.jsonl"))), warm_start_steps=2)
    ensure_tiny_model(task, seed=0)
    err = capsys.readouterr().err
    assert "it called a tool in 0% of the episodes" in err and "solved 0%" in err
    assert "warning:" in err and "raise warm_start_steps (now 2)" in err and "1 of 1 call one" in err


def _tiny_policy(build_tokenizer):
    from transformers import LlamaForCausalLM

    from rlab.engine.policy.model import Policy
    from rlab.engine.policy.tiny import build_config

    tokenizer = build_tokenizer(tools=True)
    return Policy(LlamaForCausalLM(build_config(len(tokenizer))), tokenizer, "cpu")


# -- a verifiers ToolEnv ------------------------------------------------------------------------

VERIFIERS_TOOL_ENV = '''
import datasets
import verifiers as vf


def multiply(a: int, b: int) -> int:
    """Multiply two integers.

    Args:
        a: the first factor
        b: the second factor
    """
    return a * b


def load_environment():
    rows = [{"question": f"What is {a} * 7?", "answer": str(7 * a)} for a in range(10, 30)]

    def correct_answer(completion, answer, parser, **kwargs) -> float:
        return 1.0 if (parser.parse_answer(completion) or "").strip() == answer else 0.0

    parser = vf.Parser()
    rubric = vf.Rubric(funcs=[correct_answer], weights=[1.0], parser=parser)
    return vf.ToolEnv(dataset=datasets.Dataset.from_list(rows), tools=[multiply], max_turns=3,
                      system_prompt="Use the tools.", parser=parser, rubric=rubric)
'''


@pytest.mark.e2e
def test_a_verifiers_tool_env_runs_its_tools_in_the_tool_process(tmp_path):
    pytest.importorskip("verifiers", reason="verifiers not installed: pip install 'rollout-lab[tasks]'")
    module = tmp_path / "toy_tool_env.py"
    module.write_text(VERIFIERS_TOOL_ENV)
    task = get_scenario(f"verifiers:{module}")
    assert isinstance(task, ToolScenario) and task.max_turns == 3 and task.system_prompt == "Use the tools."

    def act(messages):
        if messages[-1]["role"] == "tool":
            return messages[-1]["content"]
        return call_text("multiply", {"a": int(re.search(r"(\d+) \*", messages[-1]["content"])[1]), "b": 7})

    rollout = Rollout(ScriptedAgent(act), task, RunConfig(group_size=2))
    try:
        assert [s["function"]["name"] for s in rollout.tools.schemas] == ["multiply"]
        rollouts = rollout.play(task.eval_examples()[:2])
    finally:
        rollout.close()
    scored = score(rollouts, load_rubric(task.reward_file))
    assert scored.rewards.tolist() == [[1.0, 1.0], [1.0, 1.0]]


# -- the shipped example ------------------------------------------------------------------------

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tasks" / "shop_agent"


def test_the_shop_agent_example_loads_and_trains_a_step(tmp_path):
    """README's "Your own agent": the example task is a tool task with two tools and transcripts
    that render through the tiny tool template; one step of training stores its calls (an
    untrained policy stands in for the one its first run builds: 20 minutes)."""
    from rlab.engine.policy.tiny import build_tokenizer, save_policy
    from rlab.store.reader import StoreReader
    from rlab.engine.cli.main import main

    task = get_scenario(str(EXAMPLE))
    assert isinstance(task, ToolScenario) and task.success == "correct" and task.max_turns == 4
    policy = _tiny_policy(build_tokenizer)
    pairs = _text_pairs(task, policy)
    assert any(c == call_text("price", {"item": "lamp"}) for _, c in pairs)
    save_policy(policy, tmp_path / "model")
    db = tmp_path / "runs.db"
    assert main(["run", "--headless", "--task", str(EXAMPLE), "--model", str(tmp_path / "model"), "--max-steps", "1",
                 "--prompts-per-step", "2", "--group-size", "2", "--eval-size", "2", "--db", str(db),
                 "--name", "shop", "--no-warm-start"]) == 0  # a model without LoRA: no adapter to warm-start
    with StoreReader(db) as reader:
        run = reader.run_by_name("shop")
        assert run["manifest"]["tools"]["names"] == ["price", "multiply"]
        [step] = reader.step_metrics(run["id"])[-1:]
        assert "tools/calls_mean" in step and "turns/mean" in step
