"""Sokoban: gym-sokoban's rooms and moves (6 x 6, one box), played as text turns.

An environment nobody here designed (:mod:`scenarios.sokoban.env`): rooms
from gym-sokoban's own generator, moves, rewards and endings from its
``SokobanEnv.step()``; only the grid rendering and the parsing of ``u d l
r`` are ours. The setting is RAGEN's "SimpleSokoban" (Wang et al. 2025,
arXiv 2504.20073: 6 x 6 rooms, one box, 10 actions per episode) and
verl-agent's: the episode is trained on gym-sokoban's own reward (-0.1 a
step, +1 and +10 when the box lands on its target), and success is the box
on its target. Every level is a room seed: the train split draws 1,000
seeds from [0, 1e6) with the run's seed, skipping any whose room is a
held-out room; the held-out split is 100 fixed seeds from [1e6, 2e6). The
held-out walk is greedy, with the training budget.

gym-sokoban's small rooms are easy for random play: a uniform random walk
of 10 moves that never bumps a wall solves about a third of them. The tiny
policy is warm-started on such walks, so RL has room. The GiGPO anchor
state is the rendered room.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlab.scenarios.base import ScenarioBase
from rlab.scenarios.imitation import imitation_pairs
from rlab.scenarios.levels import SeedSplits
from rlab.scenarios.sokoban.env import SokobanEnv, level, render

LEVELS = SeedSplits(held_out_seed=6174, train_size=1000)
SFT_EPISODES = 600
SYSTEM_PROMPT = "Sokoban: push X onto O. P is you, # wall. Reply u, d, l or r.\n"


@dataclass(frozen=True)
class Sokoban(ScenarioBase):
    """A Sokoban scenario (multi-step; gym-sokoban's reward)."""

    name: str = "sokoban"
    dim: int = 6
    num_boxes: int = 1
    multi_step: bool = True
    system_prompt: str | None = SYSTEM_PROMPT
    reward_file: Path = Path(__file__).with_name("rewards.py")
    success: str | None = "solved"  # solved: every box on a target
    max_turns: int = 10
    # A 6 x 6 room is drawn as 4 lines of 4 cells (20 characters a turn): 10
    # turns with the system prompt take about 300 tokens.
    tiny_context_tokens: int | None = 512
    warm_start_steps: int = 150
    run_defaults: dict[str, Any] = field(default_factory=lambda: {"max_new_tokens": 2})

    def make_env(self, example: dict[str, Any]) -> SokobanEnv:
        """A fresh episode; the room comes from ``example["level_seed"]`` on reset."""
        return SokobanEnv(self.dim, self.num_boxes, self.max_turns)

    def example(self, seed: int, suffix: str = "") -> dict[str, Any]:
        """Level ``seed`` as a dataset row: ``prompt`` is its first observation."""
        return {"id": f"{self.name}-{seed}{suffix}", "prompt": render(*level(self.dim, self.num_boxes, seed)),
                "answer": "", "level_seed": seed}

    def eval_examples(self) -> list[dict[str, Any]]:
        """The fixed held-out split: 100 room seeds from [1e6, 2e6), never trained on."""
        return [self.example(s) for s in LEVELS.held_out()]

    def train_examples(self, seed: int) -> list[dict[str, Any]]:
        """1,000 distinct room seeds from [0, 1e6), drawn with ``seed``, none of
        whose rooms is a held-out room (:class:`SeedSplits`)."""
        return [self.example(s) for s in LEVELS.train(seed, lambda s: render(*level(self.dim, self.num_boxes, s)))]

    def sft_pairs(self, seed: int) -> list[tuple[str, str]]:
        """(context, move) pairs from uniform random moves that change the room."""
        rng = random.Random(f"sft-{seed}")  # not the stream that drew the levels
        return imitation_pairs(self.make_env, self.train_examples(seed)[:SFT_EPISODES],
                               lambda env: rng.choice(env.legal_moves() or ["u"]), self.system_prompt)


SCENARIO = Sokoban()
