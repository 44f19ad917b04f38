"""Train and held-out levels for scenarios whose level is a seed of someone else's generator.

FrozenLake's maps (gymnasium's ``generate_random_map``) and Sokoban's rooms
(gym-sokoban's ``generate_room``) are each a function of one integer seed.
Held-out levels are a fixed sample of seeds from [1e6, 2e6) and training
levels seeds from [0, 1e6), so no held-out seed is trained on. Small levels
repeat across seeds (77 of 100 held-out 4 x 4 lakes are also drawn by some
seed of a 2,000-seed train split), so the train split also skips every seed
whose level equals a held-out level: the held-out levels are unseen, as
RAGEN (Wang et al. 2025, arXiv 2504.20073) evaluates on unseen levels.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable
from dataclasses import dataclass

#: Train levels are seeds below this; held-out levels are seeds from it up to twice it.
SEED_SPLIT = 1_000_000


@dataclass(frozen=True)
class SeedSplits:
    """The level seeds of a scenario's two splits.

    Attributes:
        held_out_seed: seeds the fixed draw of the held-out seeds.
        train_size: training levels per run seed.
        held_out_size: held-out levels.
    """

    held_out_seed: int
    train_size: int
    held_out_size: int = 100

    def held_out(self) -> list[int]:
        """The held-out levels: ``held_out_size`` fixed seeds from [1e6, 2e6)."""
        return random.Random(self.held_out_seed).sample(range(SEED_SPLIT, 2 * SEED_SPLIT), self.held_out_size)

    def train(self, seed: int, level: Callable[[int], Hashable]) -> list[int]:
        """``train_size`` distinct seeds from [0, 1e6), drawn with the run's ``seed``,
        none of whose ``level(seed)`` equals a held-out level's."""
        held_out = {level(s) for s in self.held_out()}
        rng, seeds, picked = random.Random(seed), [], set()
        while len(seeds) < self.train_size:
            s = rng.randrange(SEED_SPLIT)
            if s not in picked and level(s) not in held_out:
                seeds.append(s)
            picked.add(s)
        return seeds
