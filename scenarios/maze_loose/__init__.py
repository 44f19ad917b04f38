"""Maze, loose: the 5 x 5 maze with 26 moves per walk, where only step-level credit is left.

The grid of :mod:`scenarios.maze` (17 starts, shortest walks of 1 to 8
moves) with a move budget 3.25 times the longest shortest walk, as
ALFWorld gives its agents 50 steps for household tasks that take far
fewer (Feng et al. 2025, arXiv 2505.10978, section 5.1). A random legal walk reaches the goal
in about 43 % of tries, and a sampled policy that wanders, or bumps into
a wall and tries again, still gets there: soon every walk of every group
succeeds, and GRPO's one advantage per episode is 0 everywhere. Its greedy
policy can keep a move that bumps forever (``bump 02?`` answered ``r``
again and again), which sampling escapes but the held-out greedy walk
does not. GiGPO's step-level advantage still ranks the moves made in the
same cell by their discounted returns, so it keeps learning from groups
whose walks all succeed. tests/bench/multistep.py ``curves --scenario
maze_loose`` measures it.

The longest walk (26 bumps) needs 300 tokens, so its tiny policy has a
512-token context; the default 256 holds 21 turns (``tests/test_maze.py``).
"""

from __future__ import annotations

from rlab.scenarios.maze import Maze, system_prompt
from rlab.scenarios.maze.env import SMALL

SCENARIO = Maze(name="maze_loose", grid=SMALL, system_prompt=system_prompt(SMALL), max_turns=26,
                tiny_context_tokens=512)
