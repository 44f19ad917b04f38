"""2048 rules on a 4x4 board (Cirulli's game): slides, merges, spawns, text form.

A board is a tuple of 16 ints in row-major order holding tile *exponents*:
0 is an empty cell, k is the tile 2**k. Tuples are hashable, so a board is
its own state key. Text form, one character per cell, rows joined by "/":
``.`` empty, then ``1``-``9``, ``a``-``f`` for 2, 4, ..., 2**15
(e.g. ``..1./.2../..../...b`` holds a 2, a 4 and a 2048).
"""

from __future__ import annotations

import random
import re

SIZE = 4
MOVES = ("l", "r", "u", "d")
DIGITS = ".123456789abcdef"
BOARD_TEXT = re.compile(r"[.1-9a-f]{4}(?:/[.1-9a-f]{4}){3}")

Board = tuple[int, ...]

# Cell indices of each line, ordered in the direction tiles slide toward.
_ROWS = [[r * SIZE + c for c in range(SIZE)] for r in range(SIZE)]
_COLS = [[r * SIZE + c for r in range(SIZE)] for c in range(SIZE)]
LINES = {
    "l": _ROWS,
    "r": [row[::-1] for row in _ROWS],
    "u": _COLS,
    "d": [col[::-1] for col in _COLS],
}


def slide_line(line: list[int]) -> tuple[list[int], list[int]]:
    """Slide one line toward index 0, merging equal neighbours once.

    Returns (new line, exponents of the tiles made by merges), e.g.
    [1, 1, 1, 0] -> ([2, 1, 0, 0], [2]).
    """
    tiles = [v for v in line if v]
    out, merged, i = [], [], 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1]:
            out.append(tiles[i] + 1)
            merged.append(tiles[i] + 1)
            i += 2
        else:
            out.append(tiles[i])
            i += 1
    return out + [0] * (len(line) - len(out)), merged


def move(board: Board, direction: str) -> tuple[Board, list[int]]:
    """Apply one move (``l``, ``r``, ``u`` or ``d``) without spawning.

    Returns (new board, exponents of merged tiles). The board is unchanged
    when the move is illegal.

    Raises:
        ValueError: ``direction`` is not one of :data:`MOVES`.
    """
    if direction not in LINES:
        raise ValueError(f"unknown move {direction!r}; use one of {', '.join(MOVES)}")
    cells = list(board)
    merged: list[int] = []
    for idx in LINES[direction]:
        new, m = slide_line([board[i] for i in idx])
        for i, v in zip(idx, new):
            cells[i] = v
        merged += m
    return tuple(cells), merged


def legal_moves(board: Board) -> list[str]:
    """The moves that change the board, in :data:`MOVES` order."""
    return [d for d in MOVES if move(board, d)[0] != board]


def spawn(board: Board, rng: random.Random) -> Board:
    """Put a 2 (probability 0.9) or a 4 on a uniformly chosen empty cell.

    Raises:
        ValueError: the board has no empty cell.
    """
    empty = [i for i, v in enumerate(board) if v == 0]
    if not empty:
        raise ValueError("cannot spawn a tile on a full board")
    cell = rng.choice(empty)
    value = 1 if rng.random() < 0.9 else 2
    return board[:cell] + (value,) + board[cell + 1 :]


def new_board(rng: random.Random) -> Board:
    """An empty board with two spawned tiles."""
    return spawn(spawn((0,) * (SIZE * SIZE), rng), rng)


def to_text(board: Board) -> str:
    """The compact text form, e.g. ``..1./.2../..../....``."""
    chars = "".join(DIGITS[v] for v in board)
    return "/".join(chars[r * SIZE : (r + 1) * SIZE] for r in range(SIZE))


def from_text(text: str) -> Board:
    """Parse the compact text form back into a board.

    Raises:
        ValueError: ``text`` is not 4 rows of 4 cells joined by "/".
    """
    if not BOARD_TEXT.fullmatch(text):
        raise ValueError(f"not a board: {text!r}; expected 4 rows of 4 cells from {DIGITS!r} joined by '/'")
    return tuple(DIGITS.index(c) for c in text.replace("/", ""))
