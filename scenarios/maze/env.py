"""The maze environment: walk a fixed grid to the goal, one letter per move.

One fixed layout (a :class:`Grid`) for every episode; an example only picks
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

import collections
from dataclasses import dataclass
from functools import cached_property
from typing import Any

MOVES = {"u": (-1, 0), "d": (1, 0), "l": (0, -1), "r": (0, 1)}
Cell = tuple[int, int]


@dataclass(frozen=True)
class Grid:
    """A maze layout: rows top to bottom, ``#`` wall, ``.`` free, ``G`` the goal
    (at most 10 x 10, so a cell prints as two digits)."""

    rows: tuple[str, ...]

    @cached_property
    def free_cells(self) -> list[Cell]:
        """Every cell a walk may stand on (the goal included), row by row."""
        return [(r, c) for r, row in enumerate(self.rows) for c, ch in enumerate(row) if ch != "#"]

    @cached_property
    def goal(self) -> Cell:
        """The goal cell."""
        return next((r, c) for r, row in enumerate(self.rows) for c, ch in enumerate(row) if ch == "G")

    @cached_property
    def starts(self) -> list[Cell]:
        """The free cells other than the goal, row by row."""
        return [cell for cell in self.free_cells if cell != self.goal]

    def step(self, cell: Cell, move: str) -> Cell | None:
        """The cell ``move`` leads to from ``cell``, or None (a wall, the edge, or no move)."""
        if move not in MOVES:
            return None
        r, c = cell[0] + MOVES[move][0], cell[1] + MOVES[move][1]
        if not (0 <= r < len(self.rows) and 0 <= c < len(self.rows[0])) or self.rows[r][c] == "#":
            return None
        return r, c

    def legal_moves(self, cell: Cell) -> list[str]:
        """Moves that do not bump, in ``u d l r`` order."""
        return [m for m in MOVES if self.step(cell, m) is not None]

    @cached_property
    def distance(self) -> dict[Cell, int]:
        """Moves on a shortest walk from each free cell to the goal (breadth-first search)."""
        dist, queue = {self.goal: 0}, collections.deque([self.goal])
        while queue:
            cell = queue.popleft()
            for move in self.legal_moves(cell):
                nxt = self.step(cell, move)
                if nxt is not None and nxt not in dist:
                    dist[nxt] = dist[cell] + 1
                    queue.append(nxt)
        return dist


#: The 5 x 5 maze of the ``maze`` scenario.
SMALL = Grid((
    "...#.",
    ".#...",
    ".#.#.",
    "...#.",
    "##..G",
))


def observation(cell: Cell, bump: bool = False) -> str:
    """``at RC?`` (or ``bump RC?`` after an invalid move)."""
    return f"{'bump' if bump else 'at'} {cell[0]}{cell[1]}?"


class MazeEnv:
    """One walk on ``grid`` from ``example["start"]`` (a [row, col] pair) with at most ``max_turns`` moves."""

    def __init__(self, max_turns: int, grid: Grid = SMALL):
        if max_turns < 1:
            raise ValueError(f"MazeEnv needs max_turns >= 1, got {max_turns}")
        self.max_turns = max_turns
        self.grid = grid
        self.invalid = False

    def reset(self, example: dict[str, Any]) -> tuple[list[dict], Cell]:
        """Start at ``example["start"]``; the state key is the cell.

        Raises:
            ValueError: the start is not a free, non-goal cell.
        """
        start = tuple(example.get("start") or ())
        if start not in self.grid.starts:
            raise ValueError(f"example {example.get('id')!r}: 'start' must be a free cell other than the "
                             f"goal {self.grid.goal}, got {example.get('start')!r}")
        self.cell, self.turn, self.invalid = (int(start[0]), int(start[1])), 0, False
        return [_user(observation(self.cell))], self.cell

    def step(self, action: str) -> tuple[list[dict], float, bool, Cell]:
        """Apply one move; see the module docstring for the answers."""
        self.turn += 1
        nxt = self.grid.step(self.cell, action.strip().lower())
        self.invalid = nxt is None
        self.cell = nxt or self.cell
        if self.cell == self.grid.goal:
            return [_user("goal")], 1.0, True, self.cell
        if self.turn >= self.max_turns:
            return [_user("lost")], 0.0, True, self.cell
        return [_user(observation(self.cell, bump=self.invalid))], 0.0, False, self.cell


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}
