"""FrozenLake, slippery: gymnasium's ``is_slippery=True`` on the 4 x 4 maps of :mod:`scenarios.frozenlake`.

RAGEN's default (Wang et al. 2025, arXiv 2504.20073): each move goes the
intended way with probability 1/3 and to either side otherwise, so even a
perfect policy fails on some maps. The slips' random stream is seeded by
the level, so all episodes of a group see the same stream.
"""

from __future__ import annotations

from rlab.scenarios.frozenlake import FrozenLake, system_prompt

SCENARIO = FrozenLake(name="frozenlake_slippery", is_slippery=True, system_prompt=system_prompt(4, True))
