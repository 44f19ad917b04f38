"""Maze, tight: the large maze where a walk may take only 2 moves more than the shortest.

The grid of :mod:`scenarios.maze_large`; a walk from a start at distance d
(1 to 14 moves) ends "lost" after d + 2 moves, so a walk that bumps into a
wall or enters a dead end fails. Held-out success then needs the short
walks that GiGPO's step-level advantage prefers (moves made in the same
cell compared by their discounted returns; Feng et al. 2025, arXiv
2505.10978), where on ``maze_large``'s loose budget both methods reach the
goal and only walk length tells them apart. tests/bench/multistep.py
``curves --scenario maze_tight`` measures it.
"""

from __future__ import annotations

from rlab.scenarios.maze import Maze, system_prompt
from rlab.scenarios.maze_large import LARGE

SCENARIO = Maze(name="maze_tight", grid=LARGE, system_prompt=system_prompt(LARGE), max_turns=16, slack=2)
