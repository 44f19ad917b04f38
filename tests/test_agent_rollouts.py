"""A user's rollout file through the agent process and the endpoint (engine.agent.play): the
trajectories it makes, and every bad rollout as a counted, named error that never fails the play."""

from __future__ import annotations

import textwrap

import pytest

from rlab.engine.agent.play import AgentRollout
from rlab.engine.agent.process import AgentFileError
from rlab.engine.policy.model import Policy
from rlab.engine.rewards.score_result import ScoreResult
from rlab.engine.rewards.scoring import failed_rollouts

ROLLOUT = textwrap.dedent('''
    import asyncio
    import time

    TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two numbers.",
              "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}]

    async def ask(client, model, messages, **kw):
        reply = await client.chat.completions.create(model=model, messages=messages, **kw)
        return reply.choices[0].message.model_dump(exclude_none=True)

    async def rollout(client, model, example):
        case = example["case"]
        messages = [{"role": "user", "content": example["prompt"]}]
        if case == "ok":
            return messages + [await ask(client, model, messages)]
        if case == "two_turns":
            first = await ask(client, model, messages)
            messages += [first, {"role": "user", "content": "again"}]
            return {"messages": messages + [await ask(client, model, messages)], "reward": 0.5, "metrics": {"x": 1}}
        if case == "tool":
            first = await ask(client, model, messages, tools=TOOLS)
            first["tool_calls"] = [{"id": "mine", "type": "function", "function": {"name": "add", "arguments": "{}"}}]
            return messages + [first, {"role": "tool", "tool_call_id": "mine", "content": "3"}]
        if case == "raises":
            await ask(client, model, messages)
            raise ValueError("boom")
        if case == "hangs":
            await asyncio.sleep(3600)
        if case == "garbage":
            return 42
        if case == "other_model":
            try:
                await ask(client, "gpt-4o", messages)
            except Exception:
                pass
            return messages
        if case == "over_budget":
            try:
                await ask(client, model, messages, max_tokens=100_000)
            except Exception:
                pass
            return messages
        if case == "never":
            return messages + [{"role": "assistant", "content": "made up"}]
        if case == "many":
            for _ in range(1000):
                try:
                    await ask(client, model, messages, max_tokens=1)
                except Exception:
                    break
            return messages
        if case == "unsampled":
            reply = await ask(client, model, messages)
            return messages + [reply, {"role": "user", "content": "and?"}, {"role": "assistant", "content": "made up"}]
        if case == "rewrite":
            reply = await ask(client, model, messages)
            reply["content"] = "REWRITTEN " + reply["content"]
            return messages + [reply]
        if case == "blocks":
            time.sleep(3600)
''')


@pytest.fixture(scope="module")
def policy(raw_tiny_model_dir):
    return Policy.load(raw_tiny_model_dir, "cpu")


@pytest.fixture(scope="module")
def agent(policy, tmp_path_factory):
    path = tmp_path_factory.mktemp("agent") / "rollout.py"
    path.write_text(ROLLOUT)
    # the "hangs" case waits out the limit; the others must finish well within it on a loaded CI host
    played = AgentRollout(policy, policy.tokenizer, path, timeout_s=10.0, max_new_tokens=8, max_turns=2)
    yield played
    played.close()


def _play(agent, cases, g=1):
    groups = agent.play([{"id": i, "prompt": f"{i}+1=", "case": c} for i, c in enumerate(cases)], g, 1.0)
    return [group[0] for group in groups]


def test_good_rollouts_become_trajectories_of_their_sampled_turns(agent, policy):
    ok, two, tool = _play(agent, ["ok", "two_turns", "tool"])
    assert ok.error is None and len(ok.turns) == 1 and ok.messages[-1]["role"] == "assistant"
    assert ok.turns[0].prompt_ids == policy.render(ok.messages[:1])
    assert ok.messages[-1]["content"] == ok.turns[0].text.strip() or ok.turns[0].text.startswith(
        ok.messages[-1]["content"])
    assert two.error is None and len(two.turns) == 2 and two.turns[-1].reward == 0.5
    assert two.turns[1].prompt_ids[:len(two.turns[0].prompt_ids)] == two.turns[0].prompt_ids
    assert tool.tools and tool.error is None
    assert agent.metrics["endpoint/requests"] == 4 and agent.metrics["agent/errors"] == 0


def test_every_bad_rollout_is_a_named_error_and_the_play_goes_on(agent):
    cases = ["raises", "hangs", "garbage", "other_model", "over_budget", "never", "many", "unsampled", "ok"]
    out = dict(zip(cases, _play(agent, cases)))
    kinds = {case: (t.error or "").split(":", 1)[0] for case, t in out.items()}
    assert kinds == {"raises": "raised", "hangs": "timeout", "garbage": "bad_return", "other_model": "model_not_found",
                     "over_budget": "over_budget", "never": "no_request", "many": "too_many_requests",
                     "unsampled": "unsampled", "ok": ""}
    assert "boom" in out["raises"].error and "rollout.py line" in out["raises"].error
    assert len(out["raises"].turns) == 1  # what it sampled before raising is kept (and scored 0)
    assert len(out["many"].turns) == 2 * 4  # REQUESTS_PER_TURN x max_turns, then 429
    assert agent.metrics["agent/errors"] == 8 and agent.metrics["agent/errors/timeout"] == 1
    scores = failed_rollouts([ScoreResult(1.0, {"correct": 1.0}, {})] * len(cases), list(out.values()))
    assert [s.reward for s in scores] == [0.0] * 8 + [1.0]
    assert scores[0].details["agent_error"].startswith("raised")


def test_a_rewritten_reply_trains_on_what_was_sampled_and_says_so(agent):
    (rewritten,) = _play(agent, ["rewrite"])
    assert rewritten.error is None and rewritten.notes and "turn 0" in rewritten.notes[0]
    assert rewritten.messages[-1]["content"].startswith("REWRITTEN")
    assert not rewritten.turns[0].text.startswith("REWRITTEN")


def test_an_agent_that_blocks_its_process_fails_its_rollouts_not_the_run(policy, tmp_path):
    path = tmp_path / "rollout.py"
    path.write_text(ROLLOUT)
    agent = AgentRollout(policy, policy.tokenizer, path, timeout_s=1.0, max_new_tokens=4, max_turns=1)
    try:
        blocked = _play(agent, ["blocks", "ok"])
        assert [t.error.split(":", 1)[0] for t in blocked] == ["hung", "hung"]
        (ok,) = _play(agent, ["ok"])  # a fresh process serves the next step
        assert ok.error is None
    finally:
        agent.close()


@pytest.mark.parametrize("source, match", [
    ("def rollout(client, model, example):\n    return []\n", "no `async def rollout"),
    ("async def rollout(client):\n    return []\n", "cannot take"),
    ("import not_a_module_here\n", "ImportError"),
])
def test_a_rollout_file_that_cannot_run_is_refused_before_the_run(policy, tmp_path, source, match):
    path = tmp_path / "rollout.py"
    path.write_text(source)
    agent = AgentRollout(policy, policy.tokenizer, path, timeout_s=1.0, max_new_tokens=4, max_turns=1)
    try:
        with pytest.raises(AgentFileError, match=match):
            agent.play([{"id": 0, "prompt": "x", "case": "ok"}], 1, 1.0)
    finally:
        agent.close()


def test_the_trained_tokens_are_the_sampled_tokens_never_the_agents_text_retokenized(agent, monkeypatch):
    """Every turn's completion ids and log-probs are the batcher's samples as drawn, even where the
    agent rewrote the reply; the next prompt renders what the agent sent back (what the policy saw)."""
    from rlab.engine.policy.continuous import ContinuousBatcher

    sampled = []
    submit = ContinuousBatcher.submit

    def spy(self, request):
        future = submit(self, request)
        sampled.append(future)
        return future

    monkeypatch.setattr(ContinuousBatcher, "submit", spy)
    trajectories = _play(agent, ["two_turns", "rewrite", "ok"])
    drawn = sorted((s.token_ids, s.logprobs) for f in sampled for s in f.result())
    trained = sorted((t.completion_ids, t.logprobs) for tr in trajectories for t in tr.turns)
    assert drawn == trained and len(drawn) == 4
    rewritten = trajectories[1]
    assert rewritten.messages[-1]["content"] != rewritten.turns[0].text


def test_behind_a_vllm_server_each_request_goes_on_and_its_answer_is_the_turn(policy, tmp_path):
    """--backend vllm: the endpoint forwards to the server (a loopback server answering as vLLM
    does, tests/vllm_server.py), whose tokens and log-probs are the turn's; a field its
    completions call does not take is refused by name."""
    from vllm_server import VLLMServer

    from rlab.engine.policy.vllm import VLLMBackend

    path = tmp_path / "rollout.py"
    path.write_text(ROLLOUT.replace('    if case == "ok":', '    if case == "top_p":\n'
                                    '        return messages + [await ask(client, model, messages, top_p=0.5)]\n'
                                    '    if case == "ok":'))
    with VLLMServer(eos_id=policy.eos_id, vocab=40) as server:
        backend = VLLMBackend(server.base_url, server.base_model, render=policy.render, timeout_s=5, max_retries=0)
        agent = AgentRollout(backend, policy.tokenizer, path, timeout_s=10.0, max_new_tokens=6, max_turns=2)
        try:
            ok, two, top_p = _play(agent, ["ok", "two_turns", "top_p"])
        finally:
            agent.close()
        answered = [c for batch in server.completions for c in batch]
    assert ok.error is None and two.error is None and len(two.turns) == 2
    served = sorted((tuple(int(t.split(":")[1]) for t in c["logprobs"]["tokens"]), tuple(c["logprobs"]["token_logprobs"]))
                    for c in answered)
    assert sorted((tuple(t.completion_ids), tuple(t.logprobs)) for t in ok.turns + two.turns) == served
    assert top_p.error.startswith("raised") and "top_p is not served with --backend vllm" in top_p.error
    assert agent.metrics["endpoint/requests"] == 3 and agent.metrics["endpoint/batch_width"] == 0.0


def test_a_rollout_file_that_cannot_run_stops_the_start_and_leaves_no_run_file(raw_tiny_model_dir, tmp_path):
    import json
    import subprocess
    import sys

    (tmp_path / "task.toml").write_text('train = "train.jsonl"\nrewards = "rewards.py"\nagent = "rollout.py"\n')
    (tmp_path / "rewards.py").write_text("def said(example, completion):\n    return 1.0\n")
    (tmp_path / "rollout.py").write_text("async def rollout(client, model, example) oops\n")
    (tmp_path / "train.jsonl").write_text("".join(json.dumps({"id": i, "prompt": "p", "answer": "a"}) + "\n"
                                                  for i in range(10)))
    done = subprocess.run([sys.executable, "-P", "-m", "rlab.engine.cli", "run", "--headless", "--task",
                           str(tmp_path / "task.toml"), "--model", str(raw_tiny_model_dir), "--db",
                           str(tmp_path / "r.db"), "--max-steps", "1", "--prompts-per-step", "2"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "\nrlab: error: " in done.stderr and "SyntaxError in rollout.py line 1" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "r.db").exists()


def test_an_agents_tool_message_in_the_error_convention_is_a_failed_call():
    """What the native tool loop writes for a failed call (``error: ...``) is an error here too, so a
    rubric that reads calls' errors pays an agent's rollout as it pays the native one."""
    from rlab.engine.agent.trajectory import _call

    call = {"id": "call_0_0", "type": "function", "function": {"name": "price", "arguments": '{"item": "x"}'}}
    failed = _call(call, {"role": "tool", "tool_call_id": "call_0_0", "content": "error: no item 'x'"})
    ran = _call(call, {"role": "tool", "tool_call_id": "call_0_0", "content": "12"})
    missing = _call(call, None)
    assert (failed.error, failed.result, failed.arguments) == ("no item 'x'", "", {"item": "x"})
    assert (ran.error, ran.result) == (None, "12")
    assert missing.error == "the agent sent back no result for this call"
