"""Text search over a run's trajectories, newest first, within a time budget.

Through the file's text index when it has one (``store.textindex``: FTS5
narrows the rows, ``LIKE`` checks them, so the matches are the scan's): most
text is found, or found absent, in milliseconds (on 200,000 completions of
8,000 characters, 3 GB: 19 ms p50 for text in 1 completion in 512, 82 ms
for absent text). Text made of trigrams that nearly every completion holds
("the the to so") walks every position of them instead: 1.4-2.2 s on that
file. So the index gets half of the search's budget; past it, SQLite
interrupts the query (its progress handler) and the search scans.

A scan reads the completions newest first, window by window, and stops at
``limit`` matches, at the run's first trajectory, or when the budget is spent;
what it returns says how far back it read, so the next search goes on from
there. The TUI's search (``/``) keeps to :data:`SEARCH_BUDGET_S` so at any
file size.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rlab.store.rows import fetch_dicts
from rlab.store.textindex import MIN_CHARS, TEXT_INDEX, has_text_index

SEARCH_BUDGET_S = 0.4
"""Seconds the TUI's search reads before it shows what it found (``/``)."""

FIRST_WINDOW = 4096
"""Trajectory ids a scan's first window reads; later ones grow to fit the budget."""

PROGRESS_OPCODES = 1000
"""How often (SQLite virtual-machine instructions) a query through the index checks its deadline."""

ROLLOUT_COLUMNS = (
    "t.id, t.run_id, t.step, t.group_id, t.idx, g.example_id, g.prompt, t.completion, "
    "t.reward, t.advantage, t.parse_status, t.completion_tokens, t.truncated, t.judge_score, t.success"
)
"""The columns of a rollout row (``StoreReader.rollouts_since``), ``t`` the trajectory, ``g`` its group."""


@dataclass(frozen=True)
class Found:
    """One search's matches and how far back it read.

    rows: at most ``limit`` trajectories whose completion or prompt holds the
        text, newest first, as ``StoreReader.rollouts_since`` gives them.
    indexed: read through the text index (else scanned).
    continue_before: the trajectory id to pass as ``before`` to search on,
        further back; None when the run's first trajectory was read.
    reached_step: the step of the oldest trajectory read (None: none read).
    index_timed_out: the file has the text index, but it could not narrow this
        text within half the budget (its trigrams are in most completions), so
        it was scanned.
    """

    rows: list[dict]
    indexed: bool
    continue_before: int | None
    reached_step: int | None
    index_timed_out: bool = False


def uses_text_index(conn: sqlite3.Connection, text: str) -> bool:
    """Whether a search for ``text`` tries the file's text index first: the file
    has it and the text is long enough for it (:data:`store.textindex.MIN_CHARS`)."""
    return len(text) >= MIN_CHARS and has_text_index(conn)


def like_pattern(text: str) -> str:
    """``text`` as a ``LIKE ... ESCAPE '\\'`` pattern that matches it anywhere, literally."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def search(conn: sqlite3.Connection, run_id: int, text: str, *, limit: int = 50, before: int | None = None,
           budget_s: float | None = None, window: int | None = None) -> Found:
    """The newest trajectories (at most ``limit``) of run ``run_id`` older than
    trajectory ``before`` (None: from the newest) whose completion or prompt
    contains ``text`` (case-insensitive for ASCII).

    Through the text index when the file has one and the text is long enough:
    one query, given half of ``budget_s`` (None: no limit). Text the index
    cannot narrow in that time (trigrams most completions hold) and files
    without the index are scanned newest first, window by window (``window``
    ids first, default :data:`FIRST_WINDOW`), until ``limit`` matches, the
    run's first trajectory, or the end of the budget (the window under way
    finishes). Call inside one read transaction.
    """
    started = time.perf_counter()
    pattern = like_pattern(text)
    first, newest = conn.execute("SELECT MIN(id), MAX(id) FROM trajectories WHERE run_id = ?", [run_id]).fetchone()
    if first is None:
        return Found([], False, None, None)
    hi = newest + 1 if before is None else min(before, newest + 1)
    # prompts are few (one a group): their matches are read once, and kept where the search reached
    by_prompt = [row[0] for row in conn.execute(
        'SELECT t.id FROM "groups" g JOIN trajectories t ON t.group_id = g.id WHERE g.run_id = ?1 '
        "AND g.prompt LIKE ?2 ESCAPE '\\' AND t.id < ?3 ORDER BY t.id DESC LIMIT ?4", [run_id, pattern, hi, limit])]
    index_timed_out = False
    if uses_text_index(conn, text):
        try:
            with _deadline(conn, None if budget_s is None else started + budget_s / 2):
                by_index = _through_index(conn, run_id, text, pattern, hi, limit)
            found = sorted(set(by_index) | set(by_prompt), reverse=True)[:limit]
            if len(found) == limit:  # the index stopped at the limit: more may be older
                return _found(conn, run_id, found, True, continue_before=found[-1], reached=found[-1])
            return _found(conn, run_id, found, True, continue_before=None, reached=first)
        except sqlite3.OperationalError as err:
            if "interrupted" not in str(err):
                raise
            index_timed_out = True
    return _scan(conn, run_id, pattern, by_prompt, first, hi, limit,
                 None if budget_s is None else started + budget_s, window or FIRST_WINDOW, index_timed_out)


@contextmanager
def _deadline(conn: sqlite3.Connection, deadline: float | None) -> Iterator[None]:
    """Interrupt the connection's statement past ``deadline`` (``time.perf_counter``;
    None: never): SQLite's progress handler, which FTS5's reads of its own tables call too."""
    if deadline is not None:
        conn.set_progress_handler(lambda: time.perf_counter() > deadline, PROGRESS_OPCODES)
    try:
        yield
    finally:
        conn.set_progress_handler(None, 0)


def _through_index(conn: sqlite3.Connection, run_id: int, text: str, pattern: str, hi: int,
                   limit: int) -> list[int]:
    """Ids below ``hi`` of the run's newest ``limit`` completions holding the text, through the
    index: the phrase of its trigrams (FTS5's quotes taken literally) finds them, LIKE checks them."""
    phrase = '"' + text.replace('"', '""') + '"'
    return [row[0] for row in conn.execute(
        f"SELECT f.rowid FROM {TEXT_INDEX} f JOIN trajectories t ON t.id = f.rowid "
        f"WHERE {TEXT_INDEX} MATCH ?1 AND f.rowid < ?2 AND t.run_id = ?3 AND t.completion LIKE ?4 ESCAPE '\\' "
        "ORDER BY f.rowid DESC LIMIT ?5", [phrase, hi, run_id, pattern, limit])]


def _scan(conn: sqlite3.Connection, run_id: int, pattern: str, by_prompt: list[int], first: int, hi: int,
          limit: int, deadline: float | None, size: int, index_timed_out: bool) -> Found:
    """Completions below ``hi`` scanned with LIKE, newest first, window by window:
    each as large as the time left reads at the rate so far (at most twice the last)."""
    found: list[int] = []
    by_completion: list[int] = []
    lo = hi
    while lo > first:
        lo, window_started = max(hi - size, first), time.perf_counter()
        by_completion += [row[0] for row in conn.execute(
            "SELECT t.id FROM trajectories t WHERE t.run_id = ?1 AND t.id >= ?2 AND t.id < ?3 "
            "AND t.completion LIKE ?4 ESCAPE '\\' ORDER BY t.id DESC LIMIT ?5", [run_id, lo, hi, pattern, limit])]
        found = sorted(set(by_completion) | {i for i in by_prompt if i >= lo}, reverse=True)
        if len(found) >= limit:
            return _found(conn, run_id, found[:limit], False, continue_before=found[limit - 1],
                          reached=found[limit - 1], index_timed_out=index_timed_out)
        now = time.perf_counter()
        if deadline is not None:
            if now >= deadline:
                break
            size = min(2 * size, int((hi - lo) / max(now - window_started, 1e-6) * (deadline - now)))
        else:
            size *= 2
        hi = lo
    return _found(conn, run_id, found, False, continue_before=lo if lo > first else None, reached=lo,
                  index_timed_out=index_timed_out)


def _found(conn: sqlite3.Connection, run_id: int, ids: list[int], indexed: bool, continue_before: int | None,
           reached: int, index_timed_out: bool = False) -> Found:
    """The rows of ``ids`` (newest first), where a next search goes on from, and the step of
    ``reached``, the oldest trajectory id read."""
    rows = fetch_dicts(conn.execute(
        f'SELECT {ROLLOUT_COLUMNS} FROM trajectories t JOIN "groups" g ON g.id = t.group_id '
        f"WHERE t.id IN ({', '.join('?' for _ in ids)}) ORDER BY t.id DESC", ids)) if ids else []
    step = conn.execute("SELECT step FROM trajectories WHERE run_id = ? AND id >= ? ORDER BY id LIMIT 1",
                        [run_id, reached]).fetchone()
    return Found(rows, indexed, continue_before, step[0] if step else None, index_timed_out)
