"""Two-digit addition: the embedded default scenario.

Problems are ``a+b=`` with ``a`` and ``b`` in 10..99 (8,100 problems). A
fixed held-out split of 500 problems is drawn with its own seed, so it never
depends on the run's seed; the train split is every other problem, shuffled
with the run's seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlab.scenarios.base import ScenarioBase

#: Seed of the held-out split; changing it changes the manifest's dataset hash.
HELD_OUT_SEED = 20250521
HELD_OUT_SIZE = 500
LOW, HIGH = 10, 99


def _example(a: int, b: int) -> dict[str, Any]:
    return {"id": f"add-{a}-{b}", "prompt": f"{a}+{b}=", "answer": str(a + b)}


def _all_problems() -> list[tuple[int, int]]:
    return [(a, b) for a in range(LOW, HIGH + 1) for b in range(LOW, HIGH + 1)]


def _held_out_pairs() -> set[tuple[int, int]]:
    return set(random.Random(HELD_OUT_SEED).sample(_all_problems(), HELD_OUT_SIZE))


@dataclass(frozen=True)
class Arithmetic(ScenarioBase):
    """The arithmetic scenario (single-turn, verifiable reward)."""

    name: str = "arithmetic"
    reward_file: Path = Path(__file__).with_name("rewards.py")
    success: str | None = "correct"  # solved: exact sum
    warm_start_target: float | None = 0.4

    def eval_examples(self) -> list[dict[str, Any]]:
        """The fixed held-out split: 500 examples, same for every seed."""
        return [_example(a, b) for a, b in sorted(_held_out_pairs())]

    def train_examples(self, seed: int) -> list[dict[str, Any]]:
        """Every problem not held out (7,600), shuffled with ``seed``."""
        held = _held_out_pairs()
        pairs = [p for p in _all_problems() if p not in held]
        random.Random(seed).shuffle(pairs)
        return [_example(a, b) for a, b in pairs]

    def sft_pairs(self, seed: int) -> list[tuple[str, str]]:
        """(prompt, completion) pairs of the train split, for the warm start."""
        return [(ex["prompt"], ex["answer"]) for ex in self.train_examples(seed)]


SCENARIO = Arithmetic()
