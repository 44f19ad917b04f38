"""Benchmark: tokens/s of 64 concurrent agent rollouts through the endpoint against the engine's own sampler.

Issue 56's batching figure, side by side in one process on one model: the
engine's sampler (``Policy.sample``: every prompt known up front, one batch)
and the same prompts as 64 rollouts of a user's agent, each its own
``openai.AsyncOpenAI`` request from the agent process, arriving as they come
and decoded together by the endpoint's continuous batcher
(``engine.agent``). Same model, prompts, token budget and temperature;
the two are alternated ``--repeats`` times after one warm-up of each. The
endpoint's figure counts its whole path: HTTP, the agent process, the
session's checks and recording. ``tokens_per_s`` counts sampled tokens
(EOS included) over wall seconds; ``ratio`` is endpoint / engine of the
medians; ``batch_width`` the endpoint's mean rows per decoding step.

    python tests/bench/agent_batching.py [--model smollm2-135m] [--rollouts 64] [--group-size 8]
                                         [--new-tokens 48] [--repeats 3] [--out FILE.json]

Prints one JSON object (and writes it to ``--out``), with the machine
(``engine.policy.device.describe_machine``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import textwrap
import time
from datetime import date
from pathlib import Path

import torch

from rlab.engine.agent.play import AgentRollout
from rlab.engine.policy.device import describe_machine, set_cpu_threads
from rlab.engine.policy.model import Policy
from rlab.engine.policy.smollm2 import resolve_model

ROLLOUT = textwrap.dedent('''
    async def rollout(client, model, example):
        messages = [{"role": "user", "content": example["prompt"]}]
        reply = await client.chat.completions.create(model=model, messages=messages,
                                                     max_tokens=example["new_tokens"])
        return messages + [reply.choices[0].message.model_dump(exclude_none=True)]
''')


def prompts(n: int) -> list[str]:
    """``n`` distinct short questions (groups repeat them)."""
    return [f"What is {17 + 3 * i} plus {29 + 7 * i}? Explain briefly." for i in range(n)]


def engine_side(policy: Policy, questions: list[str], group: int, new_tokens: int) -> tuple[int, float]:
    ids = [policy.render([{"role": "user", "content": q}]) for q in questions for _ in range(group)]
    start = time.perf_counter()
    samples = policy.sample(ids, max_new_tokens=new_tokens, temperature=1.0)
    return sum(len(s.token_ids) for s in samples), time.perf_counter() - start


def endpoint_side(agent: AgentRollout, questions: list[str], group: int, new_tokens: int) -> tuple[int, float, float]:
    examples = [{"id": i, "prompt": q, "new_tokens": new_tokens} for i, q in enumerate(questions)]
    start = time.perf_counter()
    groups = agent.play(examples, group, 1.0)
    seconds = time.perf_counter() - start
    errors = [t.error for g in groups for t in g if t.error]
    if errors:
        raise RuntimeError(f"{len(errors)} rollouts failed; the first: {errors[0]}")
    return sum(t.completion_tokens for g in groups for t in g), seconds, agent.metrics["endpoint/batch_width"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rollouts", type=int, default=64)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    set_cpu_threads(args.threads, tiny_policy=False)
    torch.manual_seed(0)
    policy = Policy.load(resolve_model(Path(args.model)), "cpu")
    questions = prompts(args.rollouts // args.group_size)
    with tempfile.TemporaryDirectory() as folder:
        file = Path(folder) / "rollout.py"
        file.write_text(ROLLOUT)
        agent = AgentRollout(policy, policy.tokenizer, file, timeout_s=600, max_new_tokens=args.new_tokens, max_turns=1)
        try:
            engine_side(policy, questions, args.group_size, args.new_tokens)  # warm-ups
            endpoint_side(agent, questions, args.group_size, args.new_tokens)
            engine, endpoint, widths = [], [], []
            for _ in range(args.repeats):
                tokens, seconds = engine_side(policy, questions, args.group_size, args.new_tokens)
                engine.append(tokens / seconds)
                tokens, seconds, width = endpoint_side(agent, questions, args.group_size, args.new_tokens)
                endpoint.append(tokens / seconds)
                widths.append(width)
        finally:
            agent.close()
    result = {"bench": "agent_batching", "date": date.today().isoformat(), "machine": describe_machine(),
              "model": args.model, "rollouts": args.rollouts, "group_size": args.group_size,
              "new_tokens": args.new_tokens, "repeats": args.repeats,
              "engine_tokens_per_s": [round(x, 1) for x in engine],
              "endpoint_tokens_per_s": [round(x, 1) for x in endpoint],
              "ratio": round(statistics.median(endpoint) / statistics.median(engine), 3),
              "batch_width": round(statistics.mean(widths), 2)}
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
