"""FrozenLake as text turns: gymnasium's own FrozenLake-v1, one move per turn.

The environment is gymnasium's: each episode is ``gymnasium.make("FrozenLake-v1",
desc=MAP, is_slippery=..., max_episode_steps=max_turns)``, its map drawn by
gymnasium's own generator (``generate_random_map(size, p, seed)``), and its
``step()`` moves the player (slipping sideways with probability 2/3 when the
ice is slippery), pays its reward (1.0 on the goal, else 0.0) and ends the
episode (a hole, the goal, or its step limit). Ours are only the text
rendering and the action parsing, as RAGEN plays it (Wang et al. 2025, arXiv
2504.20073), with RAGEN's cell symbols in ASCII:

    P the player   _ frozen   O a hole   G the goal      (the start is frozen ice)

    reset / after a move       the map, one line per row, e.g. ``P_O_\\n____\\n_O_O\\n___G\\n``
    an unparsable reply        ``bad\\n`` and the map again (no step; the state is kept)
    goal / hole / out of turns ``goal`` / ``hole`` / ``lost``

Moves are ``u``, ``d``, ``l``, ``r`` (or ``up``, ``down``, ``left``,
``right``), gymnasium's actions 3, 1, 0, 2. A move into the edge is the
library's: the player stays. The state key is the rendered map (GiGPO's
anchor state is the environment's own observation, identical grids; Feng et
al. 2025, arXiv 2505.10978, section 4.2).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import gymnasium
from gymnasium.envs.toy_text.frozen_lake import generate_random_map

#: Our letters and words to gymnasium's FrozenLake actions (0 left, 1 down, 2 right, 3 up).
ACTIONS = {"l": 0, "d": 1, "r": 2, "u": 3, "left": 0, "down": 1, "right": 2, "up": 3}
#: gymnasium's map letters to our symbols (RAGEN's, in ASCII).
SYMBOLS = {"S": "_", "F": "_", "H": "O", "G": "G"}
_REPLY = re.compile(r"\s*([a-z]+)\s*[.!]?\s*")


@functools.lru_cache(maxsize=8192)
def level_map(size: int, p: float, seed: int) -> tuple[str, ...]:
    """The map of level ``seed``: gymnasium's ``generate_random_map(size, p, seed)``
    (rows top to bottom, ``S`` start, ``F`` frozen, ``H`` hole, ``G`` goal)."""
    return tuple(generate_random_map(size=size, p=p, seed=seed))


def render(desc: tuple[str, ...], position: int) -> str:
    """The map as text, the player (``P``) on cell ``position`` (gymnasium's row * ncol + col)."""
    ncol = len(desc[0])
    cells = [[SYMBOLS[ch] for ch in row] for row in desc]
    cells[position // ncol][position % ncol] = "P"
    return "".join("".join(row) + "\n" for row in cells)


def parse_action(text: str) -> int | None:
    """gymnasium's action for a reply (``u``/``d``/``l``/``r`` or the word, any case,
    an optional full stop), or None for anything else."""
    match = _REPLY.fullmatch(text.lower())
    return ACTIONS.get(match.group(1)) if match else None


class FrozenLakeEnv:
    """One episode of gymnasium's FrozenLake-v1 on the map of ``example["level_seed"]``.

    Args:
        size: the map's side (4 or 8 in RAGEN's settings).
        p: the probability that a generated cell is frozen (gymnasium's ``p``).
        is_slippery: gymnasium's option: a move goes sideways with probability 2/3.
        max_turns: replies at most; gymnasium's ``max_episode_steps`` too.
    """

    def __init__(self, size: int, p: float, is_slippery: bool, max_turns: int):
        if max_turns < 1:
            raise ValueError(f"FrozenLakeEnv needs max_turns >= 1, got {max_turns}")
        self.size, self.p, self.is_slippery, self.max_turns = size, p, is_slippery, max_turns
        self.invalid = False

    def reset(self, example: dict[str, Any]) -> tuple[list[dict], str]:
        """Build gymnasium's environment on the level's map and reset it with the
        level's seed (the slips' random stream, so every episode of a group starts
        alike); the state key is the rendered map.

        Raises:
            ValueError: the example has no integer ``level_seed``.
        """
        seed = example.get("level_seed")
        if not isinstance(seed, int):
            raise ValueError(f"example {example.get('id')!r}: 'level_seed' must be an integer, got {seed!r}")
        self.desc = level_map(self.size, self.p, seed)
        self.gym = gymnasium.make("FrozenLake-v1", desc=list(self.desc), is_slippery=self.is_slippery,
                                  max_episode_steps=self.max_turns)
        self.position, _ = self.gym.reset(seed=seed)
        self.turn, self.invalid = 0, False
        grid = render(self.desc, int(self.position))
        return [_user(grid)], grid

    def step(self, action: str) -> tuple[list[dict], float, bool, str]:
        """Apply one reply with gymnasium's ``step()``; see the module docstring for the answers."""
        self.turn += 1
        move = parse_action(action)
        self.invalid = move is None
        reward, terminated, truncated = 0.0, False, False
        if move is not None:
            self.position, reward, terminated, truncated, _ = self.gym.step(move)
        grid = render(self.desc, int(self.position))
        if terminated:
            return [_user("goal" if reward > 0 else "hole")], float(reward), True, grid
        if truncated or self.turn >= self.max_turns:
            return [_user("lost")], float(reward), True, grid
        return [_user(("bad\n" if self.invalid else "") + grid)], float(reward), False, grid

    def legal_moves(self) -> list[str]:
        """Moves that leave the cell (not into the edge), in ``u d l r`` order: the warm start's random play."""
        row, col = divmod(int(self.position), self.size)
        steps = {"u": (row > 0), "d": (row < self.size - 1), "l": (col > 0), "r": (col < self.size - 1)}
        return [move for move, ok in steps.items() if ok]


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}
