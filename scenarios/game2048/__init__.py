"""2048: a multi-step scenario on a seeded 4x4 board.

Each example is a board seed; the policy plays up to 8 moves (one letter
each) and is rewarded for merges and for the largest tile at the end (see
:mod:`scenarios.game2048.env`). The tiny policy is warm-started on uniform
random *legal* play, so it learns the format and legality but not strategy.
Train seeds come from [0, 1e6) with the run's seed; the held-out split is
100 fixed seeds from [1e6, 2e6), so the two never overlap.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlab.scenarios.base import ScenarioBase
from rlab.scenarios.imitation import imitation_pairs

from rlab.scenarios.game2048.board import legal_moves, new_board, to_text
from rlab.scenarios.game2048.env import Game2048Env

MAX_TURNS = 8
TRAIN_SIZE = 2000
HELD_OUT_SEED = 20482048
HELD_OUT_SIZE = 100
SFT_EPISODES = 800
# Short: the tiny policy's 256-token context holds the prompt and a whole episode.
SYSTEM_PROMPT = "2048, 4 rows: reply l, r, u or d.\n"


def _example(seed: int) -> dict[str, Any]:
    board = new_board(random.Random(seed))
    return {"id": f"2048-{seed}", "prompt": f"{to_text(board)}?", "answer": "", "seed": seed}


@dataclass(frozen=True)
class Game2048(ScenarioBase):
    """The 2048 scenario (multi-step, per-move rewards)."""

    name: str = "game2048"
    multi_step: bool = True
    system_prompt: str | None = SYSTEM_PROMPT
    reward_file: Path = Path(__file__).with_name("rewards.py")
    success: str | None = "max_tile"  # solved: a 2048 tile
    max_turns: int = MAX_TURNS
    # The tiny policy imitates random legal play for a fixed number of
    # steps (no pass@1 target: random play is the point), so RL has room.
    warm_start_steps: int = 400

    def make_env(self, example: dict[str, Any]) -> Game2048Env:
        """A fresh environment; the board comes from ``example["seed"]`` on reset."""
        return Game2048Env(self.max_turns)

    def eval_examples(self) -> list[dict[str, Any]]:
        """The fixed held-out split: 100 seeds from [1e6, 2e6), same for every run."""
        rng = random.Random(HELD_OUT_SEED)
        return [_example(s) for s in rng.sample(range(1_000_000, 2_000_000), HELD_OUT_SIZE)]

    def train_examples(self, seed: int) -> list[dict[str, Any]]:
        """2,000 distinct board seeds from [0, 1e6), drawn with ``seed``."""
        rng = random.Random(seed)
        return [_example(s) for s in rng.sample(range(1_000_000), TRAIN_SIZE)]

    def sft_pairs(self, seed: int) -> list[tuple[str, str]]:
        """(context, move) pairs from uniform random legal play.

        The context is the conversation so far as the tiny model sees it:
        the system prompt and the messages' contents concatenated, each assistant message followed
        by ``scenarios.imitation.EOS_TEXT``.
        """
        rng = random.Random(f"sft-{seed}")  # not the stream that drew the seeds
        return imitation_pairs(self.make_env, self.train_examples(seed)[:SFT_EPISODES],
                               lambda env: rng.choice(legal_moves(env.board)), self.system_prompt)


SCENARIO = Game2048()
