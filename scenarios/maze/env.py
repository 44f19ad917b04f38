"""The maze environment: walk a fixed grid to the goal, one letter per move.

One fixed layout (:data:`LAYOUT`) for every episode; an example only picks
the start cell, so the same cells recur across the episodes of a group and
across groups: GiGPO's anchor states (Feng et al. 2025, arXiv 2505.10978,
section 4.2) are large, which is what step-level credit needs. Observations
are short, for the tiny character-level policy:

    reset / after a move   ``at 20?``        (row, column)
    into a wall or edge    ``bump 20?``      (invalid; the state is kept)
    goal reached           ``goal``
    last turn used up      ``lost``

Moves are ``u``, ``d``, ``l``, ``r``. The state key is the cell (row, col).
Reward: 1.0 on reaching the goal, 0.0 on every other turn.
"""

from __future__ import annotations

from typing import Any

#: The maze: ``#`` wall, ``.`` free, ``G`` the goal. Rows top to bottom.
LAYOUT = (
    "...#.",
    ".#...",
    ".#.#.",
    "...#.",
    "##..G",
)
MOVES = {"u": (-1, 0), "d": (1, 0), "l": (0, -1), "r": (0, 1)}


def free_cells() -> list[tuple[int, int]]:
    """Every cell a walk may stand on (the goal included), row by row."""
    return [(r, c) for r, row in enumerate(LAYOUT) for c, ch in enumerate(row) if ch != "#"]


GOAL = next((r, c) for r, row in enumerate(LAYOUT) for c, ch in enumerate(row) if ch == "G")


def step_cell(cell: tuple[int, int], move: str) -> tuple[int, int] | None:
    """The cell ``move`` leads to from ``cell``, or None (a wall, the edge, or no move)."""
    if move not in MOVES:
        return None
    r, c = cell[0] + MOVES[move][0], cell[1] + MOVES[move][1]
    if not (0 <= r < len(LAYOUT) and 0 <= c < len(LAYOUT[0])) or LAYOUT[r][c] == "#":
        return None
    return r, c


def legal_moves(cell: tuple[int, int]) -> list[str]:
    """Moves that do not bump, in ``u d l r`` order."""
    return [m for m in MOVES if step_cell(cell, m) is not None]


def observation(cell: tuple[int, int], bump: bool = False) -> str:
    """``at RC?`` (or ``bump RC?`` after an invalid move)."""
    return f"{'bump' if bump else 'at'} {cell[0]}{cell[1]}?"


class MazeEnv:
    """One walk from ``example["start"]`` (a [row, col] pair) with at most ``max_turns`` moves."""

    def __init__(self, max_turns: int):
        if max_turns < 1:
            raise ValueError(f"MazeEnv needs max_turns >= 1, got {max_turns}")
        self.max_turns = max_turns
        self.invalid = False

    def reset(self, example: dict[str, Any]) -> tuple[list[dict], tuple[int, int]]:
        """Start at ``example["start"]``; the state key is the cell.

        Raises:
            ValueError: the start is not a free, non-goal cell.
        """
        start = tuple(example.get("start") or ())
        if start not in free_cells() or start == GOAL:
            raise ValueError(f"example {example.get('id')!r}: 'start' must be a free cell other than the "
                             f"goal {GOAL}, got {example.get('start')!r}")
        self.cell, self.turn, self.invalid = (int(start[0]), int(start[1])), 0, False
        return [_user(observation(self.cell))], self.cell

    def step(self, action: str) -> tuple[list[dict], float, bool, tuple[int, int]]:
        """Apply one move; see the module docstring for the answers."""
        self.turn += 1
        nxt = step_cell(self.cell, action.strip().lower())
        self.invalid = nxt is None
        self.cell = nxt or self.cell
        if self.cell == GOAL:
            return [_user("goal")], 1.0, True, self.cell
        if self.turn >= self.max_turns:
            return [_user("lost")], 0.0, True, self.cell
        return [_user(observation(self.cell, bump=self.invalid))], 0.0, False, self.cell


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}
