"""Maze: a multi-step scenario whose states recur across episodes (GiGPO's case).

The policy walks a fixed maze (:mod:`scenarios.maze.env`) from a start cell
to the goal in at most ``max_turns`` moves. Every episode of every group
moves through the same cells, so anchor groups are large and the step-level
advantage compares moves made in the same cell (Feng et al. 2025, arXiv
2505.10978, section 4.2). The tiny policy is warm-started on uniform random
legal moves, so RL has room. The held-out split is every start cell once
(greedy); train examples draw start cells with the run's seed. The maze is
fixed, so held-out starts are not new states: the split measures the
policy, not generalisation.

``maze`` is the 5 x 5 grid below (17 starts, 10 moves, shortest walks 1 to
8; random legal walks reach the goal in about 24 % of tries): a minute of
training solves it with either method. ``maze_large``
(:mod:`scenarios.maze_large`) is the harder case.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlab.scenarios.base import ScenarioBase
from rlab.scenarios.imitation import imitation_pairs
from rlab.scenarios.maze.env import SMALL, Cell, Grid, MazeEnv, observation

TRAIN_SIZE = 2000
SFT_EPISODES = 600


def system_prompt(grid: Grid) -> str:
    """The rules in one line: where the goal is and the four moves."""
    return f"Maze, goal at {grid.goal[0]}{grid.goal[1]}. Reply u, d, l or r.\n"


def _example(grid: Grid, cell: Cell, suffix: str = "", slack: int | None = None) -> dict[str, Any]:
    """A start cell as a dataset row; ``shortest`` is its BFS distance to the
    goal (moves), so the rubric can tell a shortest walk from a detour; ``slack``,
    when given, overrides the scenario's for this row (:meth:`Maze.make_env`)."""
    row = {"id": f"maze-{cell[0]}{cell[1]}{suffix}", "prompt": observation(cell), "answer": "",
           "start": list(cell), "shortest": grid.distance[cell]}
    return row if slack is None else {**row, "slack": slack}


@dataclass(frozen=True)
class Maze(ScenarioBase):
    """A maze scenario (multi-step, reward 1 on reaching the goal) on ``grid``."""

    name: str = "maze"
    grid: Grid = SMALL
    multi_step: bool = True
    system_prompt: str | None = system_prompt(SMALL)
    reward_file: Path = Path(__file__).with_name("rewards.py")
    success: str | None = "reached"  # solved: the walk reached the goal
    # The tiny policy's default context (256 tokens) holds 21 turns after the
    # system prompt (a turn is up to 10 tokens); longer walks ask for more room.
    max_turns: int = 10
    # None: every walk may take max_turns moves; k: a walk from a start at
    # distance d may take min(d + k, max_turns), so detours fail.
    slack: int | None = None
    # The held-out walks' slack, when it differs from the training walks'
    # (``slack``): a loose training budget and a strict held-out one ask
    # whether the greedy walk knows the way, not only whether it arrives.
    eval_slack: int | None = None
    # Random legal play for a fixed number of steps (no pass@1 target): the
    # format and legality, not the way to the goal.
    warm_start_steps: int = 150
    run_defaults: dict[str, Any] = field(default_factory=lambda: {"max_new_tokens": 2})

    def make_env(self, example: dict[str, Any]) -> MazeEnv:
        """A fresh environment with this example's move budget (the row's
        ``slack`` if it has one, else the scenario's); the start cell is read
        on reset (which names a bad one)."""
        start = tuple(example.get("start") or ())
        slack = example.get("slack", self.slack)
        if slack is None or start not in self.grid.distance:
            return MazeEnv(self.max_turns, self.grid)
        return MazeEnv(min(self.grid.distance[start] + slack, self.max_turns), self.grid)

    def eval_examples(self) -> list[dict[str, Any]]:
        """The fixed held-out split: every start cell once, with ``eval_slack``."""
        return [_example(self.grid, cell, slack=self.eval_slack) for cell in self.grid.starts]

    def train_examples(self, seed: int) -> list[dict[str, Any]]:
        """2,000 examples with start cells drawn uniformly with ``seed``."""
        rng = random.Random(seed)
        return [_example(self.grid, rng.choice(self.grid.starts), f"-{i}") for i in range(TRAIN_SIZE)]

    def sft_pairs(self, seed: int) -> list[tuple[str, str]]:
        """(context, move) pairs from uniform random legal moves (contexts as in
        ``scenarios.imitation``: the system prompt, then the conversation)."""
        rng = random.Random(f"sft-{seed}")  # not the stream that drew the starts
        return imitation_pairs(self.make_env, self.train_examples(seed)[:SFT_EPISODES],
                               lambda env: rng.choice(env.grid.legal_moves(env.cell)), self.system_prompt)


SCENARIO = Maze()
