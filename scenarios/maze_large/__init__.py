"""Maze, large: the maze scenario on a 7 x 7 grid with dead ends and a tight move budget.

31 start cells, shortest walks of 1 to 14 moves, 14 moves allowed: a random
legal walk reaches the goal in about 10 % of tries (400 walks per start,
seeded), and a walk that wanders into a dead end rarely has the moves left
to recover. The reward stays sparse (1 on reaching the goal): the case where
GiGPO's step-level advantage, which compares the moves made in the same cell
by their discounted returns, should beat GRPO's one advantage per episode
(Feng et al. 2025, arXiv 2505.10978). tests/bench/multistep.py ``curves
--scenario maze_large`` measures it.
"""

from __future__ import annotations

from rlab.scenarios.maze import Maze, system_prompt
from rlab.scenarios.maze.env import Grid

LARGE = Grid((
    ".....#.",
    "####.#.",
    "...#...",
    ".#.###.",
    ".#.....",
    ".####.#",
    "......G",
))

SCENARIO = Maze(name="maze_large", grid=LARGE, system_prompt=system_prompt(LARGE), max_turns=14)
