"""What tool execution adds to a rollout of the same tokens (issue 45): the tool loop's own time
(parsing the calls, the round trip to the isolated tool process, the tool, the messages back)
beside the whole rollout's.

    python tests/bench/tool_cost.py [--steps 5] [--prompts 16] [--group 8]

Plays the calculator scenario's rollouts with its shipped tiny policy (temperature
1, so about a third of the episodes call a tool at first) and times every
``ToolEpisode.step`` inside them. Prints one JSON object: rollout seconds,
tool-loop seconds, calls, sampled tokens, and ``tool_share`` = tool-loop
seconds / (rollout seconds - tool-loop seconds): how much longer the same tokens
took because their calls ran (the target is <= 0.10).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

import torch  # noqa: E402

from rlab.engine.run.config import RunConfig  # noqa: E402
from rlab.engine.policy.device import describe_machine  # noqa: E402
from rlab.engine.policy.model import Policy  # noqa: E402
from rlab.engine.rollout.play import Rollout  # noqa: E402
from rlab.engine.tools.episode import ToolEpisode  # noqa: E402
from rlab.engine.train.warm_start import ensure_tiny_model  # noqa: E402
from rlab.scenarios import get_scenario  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--model", type=Path, help="a trained policy's directory (a checkpoint's model/), "
                        "whose episodes all call (default: the shipped warm start, about a third call)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as the engine runs the tiny policy
    scenario = get_scenario("calculator")
    policy = Policy.load(args.model or ensure_tiny_model(scenario), "cpu")
    rollout = Rollout(policy, scenario, RunConfig(scenario="calculator").with_run_defaults(scenario.run_defaults))
    spent = [0.0]
    step = ToolEpisode.step

    def timed(self, action):
        t0 = time.perf_counter()
        try:
            return step(self, action)
        finally:
            spent[0] += time.perf_counter() - t0

    ToolEpisode.step = timed  # type: ignore[method-assign]
    rng = random.Random(0)
    examples = scenario.train_examples(0)
    rollout.tools.schemas  # the tool process started and loaded before the clock
    rollout.play(rng.sample(examples, 2), group_size=2)  # warm-up: first calls, kernels
    spent[0], total, calls, tokens = 0.0, 0.0, 0, 0
    for _ in range(args.steps):
        t0 = time.perf_counter()
        played = rollout.play(rng.sample(examples, args.prompts), group_size=args.group)
        total += time.perf_counter() - t0
        calls += sum(len(t.tool_calls) for t in played.trajectories())
        tokens += sum(t.completion_tokens for t in played.trajectories())
    rollout.close()
    print(json.dumps({"date": time.strftime("%Y-%m-%d"), "machine": describe_machine(), "steps": args.steps,
                      "model": str(args.model) if args.model else "shipped warm start",
                      "episodes_per_step": args.prompts * args.group, "rollout_s": round(total, 3),
                      "tool_loop_s": round(spent[0], 3), "calls": calls, "sampled_tokens": tokens,
                      "seconds_per_call": round(spent[0] / max(calls, 1), 5),
                      "tool_share": round(spent[0] / (total - spent[0]), 4)}))


if __name__ == "__main__":
    main()
