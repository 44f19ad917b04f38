"""Benchmark: GiGPO advantages on 1,000,000 turns with realistic state recurrence.

Turns come from simulated number-guessing play: each group is 8 episodes
from the interval 1..N; each guess is the midpoint of the interval still
possible with probability 1/2 (a half-trained policy), else uniform in it.
The state key is that interval as a tuple, so intervals recur across the
episodes of a group as they do in real runs. Reward 1 on the correct guess.

Prints one JSON object: the batched path (``gigpo_batch`` over all groups at
once) and the per-group path (``gigpo`` in a loop), each with seconds (best
of ``--repeat``) and turns_per_s.

Run: ``PYTHONPATH=. nice -n 10 .venv/bin/python tests/bench/gigpo.py``
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from rlab.engine.train.gigpo import gigpo, gigpo_batch

GROUP_SIZE = 8
SECRET_RANGE = 40_000  # this play takes ~16 turns on 1..40,000
MAX_TURNS = 40


def simulate(n_turns: int, seed: int) -> list[tuple[list[list[float]], list[list[tuple[int, int]]]]]:
    """Groups of (step_rewards, state_keys) until ``n_turns`` turns in all."""
    rng = np.random.default_rng(seed)
    groups, total = [], 0
    while total < n_turns:
        secret = int(rng.integers(1, SECRET_RANGE + 1))
        rewards, keys = [], []
        for _ in range(GROUP_SIZE):
            lo, hi, ep_r, ep_k = 1, SECRET_RANGE, [], []
            for _ in range(MAX_TURNS):
                ep_k.append((lo, hi))
                guess = (lo + hi) // 2 if rng.random() < 0.5 else int(rng.integers(lo, hi + 1))
                ep_r.append(1.0 if guess == secret else 0.0)
                if guess == secret:
                    break
                lo, hi = (guess + 1, hi) if guess < secret else (lo, guess - 1)
            rewards.append(ep_r)
            keys.append(ep_k)
            total += len(ep_r)
        groups.append((rewards, keys))
    return groups


def flatten(groups):
    """Flat arrays for ``gigpo_batch``: rewards, lengths, group ids, keys."""
    rewards, lengths, group_ids, keys = [], [], [], []
    for g, (ep_rewards, ep_keys) in enumerate(groups):
        for r, k in zip(ep_rewards, ep_keys):
            rewards.extend(r)
            keys.extend(k)
            lengths.append(len(r))
            group_ids.append(g)
    return np.array(rewards), np.array(lengths), np.array(group_ids), keys


def best_of(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    groups = simulate(args.turns, args.seed)
    rewards, lengths, group_ids, keys = flatten(groups)
    turns = len(rewards)
    batched = best_of(args.repeat, lambda: gigpo_batch(rewards, lengths, group_ids, keys))
    per_group = best_of(args.repeat, lambda: [gigpo(r, k) for r, k in groups])
    anchors = gigpo_batch(rewards, lengths, group_ids, keys).anchor_size_flat
    print(
        json.dumps(
            {
                "turns": turns,
                "groups": len(groups),
                "episodes": len(lengths),
                "mean_turns_per_episode": round(turns / len(lengths), 2),
                "frac_turns_in_shared_anchor": round(float((anchors > 1).mean()), 3),
                "batched": {"seconds": round(batched, 4), "turns_per_s": round(turns / batched)},
                "per_group": {"seconds": round(per_group, 4), "turns_per_s": round(turns / per_group)},
            }
        )
    )


if __name__ == "__main__":
    main()
