"""FrozenLake: gymnasium's FrozenLake-v1 on seeded random maps, played as text turns.

An environment nobody here designed (:mod:`scenarios.frozenlake.env`): the
maps come from gymnasium's own generator (``generate_random_map(size=4,
p=0.8, seed)``), the moves, rewards (1.0 on the goal) and endings (a hole,
the goal) from its ``step()``; only the grid rendering and the parsing of
``u d l r`` are ours, as RAGEN plays FrozenLake (Wang et al. 2025, arXiv
2504.20073: 4 x 4 maps, p = 0.8). Every level is a map seed: the train
split draws 2,000 seeds from [0, 1e6) with the run's seed, the held-out
split is 100 fixed seeds from [1e6, 2e6), so no held-out seed is ever
trained on. Small maps repeat (77 of the 100 held-out 4 x 4 maps are also
drawn by some seed of a 2,000-seed train split), so the train split skips
every seed whose map is a held-out map: the held-out maps are unseen. The
held-out walk is greedy, with the training budget.

``frozenlake`` is 4 x 4 on solid ice (RAGEN's default is slippery; a
deterministic lake makes held-out success measure the policy, not the
slips) with 10 moves (RAGEN's 10 actions per episode; shortest walks are 6).
``frozenlake_slippery`` is gymnasium's slippery lake, ``frozenlake_8x8``
the 8 x 8 maps. The tiny policy is warm-started on uniform random moves that
stay on the map (a random walk of 10 moves reaches the goal on about 4 % of
4 x 4 maps), so RL has room. The GiGPO anchor state is the rendered map.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlab.scenarios.base import ScenarioBase
from rlab.scenarios.frozenlake.env import FrozenLakeEnv, level_map, render
from rlab.scenarios.imitation import imitation_pairs
from rlab.scenarios.levels import SeedSplits

LEVELS = SeedSplits(held_out_seed=1729, train_size=2000)
SFT_EPISODES = 800


def system_prompt(size: int, slippery: bool) -> str:
    """The rules in one line (short: the tiny policy reads every character)."""
    ice = " Slippery." if slippery else ""
    return f"FrozenLake {size}x{size}: P to G, avoid O.{ice} Reply u, d, l or r.\n"


@dataclass(frozen=True)
class FrozenLake(ScenarioBase):
    """A FrozenLake scenario (multi-step; gymnasium's reward: 1.0 on the goal)."""

    name: str = "frozenlake"
    size: int = 4
    p: float = 0.8
    is_slippery: bool = False
    multi_step: bool = True
    system_prompt: str | None = system_prompt(4, False)
    reward_file: Path = Path(__file__).with_name("rewards.py")
    success: str | None = "reached"  # solved: the walk reached the goal
    max_turns: int = 10
    # The rendered map is size * (size + 1) characters per turn: 10 turns of a
    # 4 x 4 map with the system prompt take about 320 tokens.
    tiny_context_tokens: int | None = 512
    # Random play for a fixed number of steps (no pass@1 target): the format
    # and the moves, not the way to the goal.
    warm_start_steps: int = 150
    run_defaults: dict[str, Any] = field(default_factory=lambda: {"max_new_tokens": 2})

    def make_env(self, example: dict[str, Any]) -> FrozenLakeEnv:
        """A fresh episode; the map comes from ``example["level_seed"]`` on reset."""
        return FrozenLakeEnv(self.size, self.p, self.is_slippery, self.max_turns)

    def example(self, seed: int, suffix: str = "") -> dict[str, Any]:
        """Level ``seed`` as a dataset row: ``prompt`` is its first observation."""
        return {"id": f"{self.name}-{seed}{suffix}", "prompt": render(level_map(self.size, self.p, seed), 0),
                "answer": "", "level_seed": seed}

    def eval_examples(self) -> list[dict[str, Any]]:
        """The fixed held-out split: 100 level seeds from [1e6, 2e6), never trained on."""
        return [self.example(s) for s in LEVELS.held_out()]

    def train_examples(self, seed: int) -> list[dict[str, Any]]:
        """2,000 distinct level seeds from [0, 1e6), drawn with ``seed``, none of
        whose maps is a held-out map (:class:`SeedSplits`)."""
        return [self.example(s) for s in LEVELS.train(seed, lambda s: level_map(self.size, self.p, s))]

    def sft_pairs(self, seed: int) -> list[tuple[str, str]]:
        """(context, move) pairs from uniform random moves that stay on the map."""
        rng = random.Random(f"sft-{seed}")  # not the stream that drew the levels
        return imitation_pairs(self.make_env, self.train_examples(seed)[:SFT_EPISODES],
                               lambda env: rng.choice(env.legal_moves()), self.system_prompt)


SCENARIO = FrozenLake()
