"""Maze, loose then strict: trained with maze_loose's 26 moves, held out with the shortest walk plus 2.

The 5 x 5 grid and training walks of :mod:`scenarios.maze_loose`; only the
held-out split differs: the greedy walk from a start at distance d may take
d + 2 moves, as in :mod:`scenarios.maze_tight`. Training forgives every
detour (soon every sampled walk arrives and GRPO's episode advantage is 0
everywhere); the held-out walk must know the way. That is the part of the
task only step-level credit still teaches: GiGPO's anchor groups rank the
moves made in one cell by their discounted returns, which are higher for
the move that shortens the walk (Feng et al. 2025, arXiv 2505.10978,
section 4.2). tests/bench/multistep.py ``curves --scenario maze_loose_strict``
measures it.
"""

from __future__ import annotations

from rlab.scenarios.maze import Maze, system_prompt
from rlab.scenarios.maze.env import SMALL

SCENARIO = Maze(name="maze_loose_strict", grid=SMALL, system_prompt=system_prompt(SMALL), max_turns=26,
                tiny_context_tokens=512, eval_slack=2)
