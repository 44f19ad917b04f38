"""Benchmark: scoring cost of the arithmetic rubric and latency of a reward-edit check.

Prints one JSON object:
- ``score_step_ms``: median milliseconds to score one step of 256 completions
  with ``Rubric.score_group``, called once per group (32 groups of 8) and
  once with all 256 (``score_flat_ms``); the budget is < 5 ms per step.
- ``raw_calls_ms``: the same 256 reward-function calls made directly, with
  no time limit or normalisation (the floor).
- ``process_flat_ms``: the 256 completions scored in the persistent scoring
  process (``engine.rewards.scoring_process.ProcessRubric``, what the engine does each
  step): one JSON round trip; ``process_overhead_ms`` is it minus
  ``score_flat_ms``; ``process_start_s`` the first call (process start-up).
- ``check_edit_s``: median seconds of ``engine.rewards.edit.check.check_edit`` on
  8 groups of 8 (one child process: load, validate, dry-run old vs new).

Run: ``nice -n 10 .venv/bin/python tests/bench/rubric.py [--repeat 50]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from rlab.engine.rewards.edit.check import check_edit
from rlab.engine.rewards.rubric import load_rubric
from rlab.engine.rewards.scoring_process import ProcessRubric, ScoringProcess

REWARDS = Path(__file__).resolve().parents[2] / "scenarios" / "arithmetic" / "rewards.py"


def completions(n: int) -> tuple[list[dict], list[str]]:
    """n arithmetic examples and a mix of right, wrong, malformed and empty answers."""
    examples = [{"id": f"e{i}", "prompt": f"What is {i} + 1?", "answer": i + 1} for i in range(n)]
    answers = [str(i + 1) if i % 4 == 0 else ("12" if i % 4 == 1 else ("x y" if i % 4 == 2 else "")) for i in range(n)]
    return examples, answers


def median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    rubric = load_rubric(REWARDS)
    fn = rubric.functions["correct"]
    examples, answers = completions(256)
    per_group = [(examples[i : i + 8], answers[i : i + 8]) for i in range(0, 256, 8)]
    source = REWARDS.read_text()
    groups = [
        {"trajectories": [{"example": e, "completion": c, "reward": 0.0} for e, c in zip(ex, ans)]}
        for ex, ans in per_group[:8]
    ]
    process = ScoringProcess()
    in_process = ProcessRubric(rubric, process)
    start = time.perf_counter()
    in_process.score_group(examples[:1], answers[:1])
    started = time.perf_counter() - start
    figures = {
        "score_step_ms": median_ms(lambda: [rubric.score_group(e, c) for e, c in per_group], args.repeat),
        "score_flat_ms": median_ms(lambda: rubric.score_group(examples, answers), args.repeat),
        "raw_calls_ms": median_ms(lambda: [fn(e, c) for e, c in zip(examples, answers)], args.repeat),
        "process_flat_ms": median_ms(lambda: in_process.score_group(examples, answers), args.repeat),
        "process_start_s": started,
        "check_edit_s": median_ms(lambda: check_edit(source, source, groups, 5.0), 5) / 1e3,
        "completions_per_step": 256,
    }
    process.close()
    figures["process_overhead_ms"] = figures["process_flat_ms"] - figures["score_flat_ms"]
    print(json.dumps({k: round(v, 4) for k, v in figures.items()}))


if __name__ == "__main__":
    main()
