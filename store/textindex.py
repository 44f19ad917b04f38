"""The run file's opt-in text index: SQLite FTS5 over the trajectories' completions.

``rlab index`` builds it (:func:`build_text_index`); from then on a trigger
keeps it current, whichever process writes the file, and
:meth:`store.reader.StoreReader.search` finds text through it instead of
scanning every completion. The trigram tokenizer (SQLite >= 3.34) indexes
every three characters, so a quoted phrase matches any substring of three
characters or more, as the search's ``LIKE`` does: the index only narrows the
rows that ``LIKE`` then checks, so results are the scan's.

Opt-in, not a migration (a migration changes every file), because of what it
costs, measured on 200,000 trajectories of 8,000 characters
(``tests/bench/store.py --trajectories 200000 --steps 2000
--completion-chars 8000 [--text-index]``): the file more than doubles and
the writer ingests 17 times slower; docs/results.md, "The run file at
scale (issue 39)", has the figures.

The index holds no text of its own (``content=trajectories``: FTS5 reads a
completion from its row when it needs it). Completions are written once,
never updated or deleted (a resume supersedes groups, ``store.writer``), so
one trigger, after each insert, keeps it current. A migration that rebuilt
the trajectories table would drop that trigger; ours only add columns
(``store.migrations``).
"""

from __future__ import annotations

import sqlite3
import time

import sqlite_utils

from rlab.store.db import write_transaction

TEXT_INDEX = "trajectories_fts"
"""The FTS5 table of the index (sqlite-utils' name for a table's index)."""

MIN_CHARS = 3
"""The shortest text the trigram index finds; shorter text is searched by a scan."""

_CREATE = [
    f"CREATE VIRTUAL TABLE {TEXT_INDEX} USING fts5(completion, content='trajectories', "
    "content_rowid='id', tokenize='trigram')",
    f"CREATE TRIGGER {TEXT_INDEX}_insert AFTER INSERT ON trajectories BEGIN "
    f"INSERT INTO {TEXT_INDEX} (rowid, completion) VALUES (new.id, new.completion); END",
    f"INSERT INTO {TEXT_INDEX} (rowid, completion) SELECT id, completion FROM trajectories",
]


def has_text_index(conn: sqlite3.Connection) -> bool:
    """Whether the file holds the text index."""
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                        [TEXT_INDEX]).fetchone() is not None


def build_text_index(db: sqlite_utils.Database) -> float | None:
    """Build the text index of every completion in ``db`` (opened for
    writing, ``store.db.open_db``) and the trigger that keeps it current, in
    one write transaction (no row written meanwhile is missed); return the
    seconds it took, or None when the file had it already.

    sqlite-utils' ``enable_fts`` builds the same table, but commits between
    its statements, so a row written between the fill and the trigger would
    be missing from the index.

    The transaction holds the file's write lock for the whole build (minutes
    on gigabytes): a run writing the file meanwhile waits, and gives up
    after ``store.db.BUSY_TIMEOUT_S``; build it while no run writes.
    """
    started = time.perf_counter()
    with write_transaction(db):
        if has_text_index(db.conn):
            return None
        for statement in _CREATE:
            db.execute(statement)
    return time.perf_counter() - started

