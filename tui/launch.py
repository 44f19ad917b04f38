"""The app as the command line opens it (``engine.cli.frontend``): on a run being
written by a process it spawns (an engine, or ``rlab watch --follow``'s importer),
or on a run already in a file."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the app (textual) loads when a screen is asked for, not when the entry point is
    from rlab.tui.app import RolloutLabApp


class TextualFrontend:
    """The ``rlab.frontend`` entry point ``tui`` (pyproject.toml): each call runs the app until it quits."""

    def open_run(self, db: Path, name: str, command: list[str]) -> None:
        """The app spawns ``command``, which writes run ``name`` of ``db``, and follows the run."""
        from rlab.tui.app import RolloutLabApp

        RolloutLabApp(db, run_name=name, engine_cmd=command).run()

    def watch(self, db: Path, run: str | None, alerts: list[str]) -> None:
        """``rlab watch``: :func:`watch_app` run until it quits (its errors are raised before it opens)."""
        watch_app(db, run, alerts).run()


def watch_app(db: Path, run: str | None = None, alerts: list[str] | None = None) -> RolloutLabApp:
    """The app ``rlab watch`` opens on run ``run`` of ``db`` (a name or id;
    None: the latest), with the ``--alert NAME=VALUE`` overrides ``alerts``.

    The file's header is checked, not its every page (``PRAGMA quick_check``
    reads the whole file: 1.7 s for 3 GB in the page cache); what the first
    screen shows is read here, so a file damaged there is refused before the
    TUI opens, and damage elsewhere is reported where a screen meets it.

    Raises:
        FileNotFoundError: no file at ``db``.
        RunFileError: not a run file, or damaged where the first screen reads.
        UsageError: no runs in the file, or a bad ``--alert``.
        RunNotFoundError: no run ``run``.
    """
    from rlab.engine.cli.watch import checked_thresholds
    from rlab.store.db import check_run_file, existing_run_file
    from rlab.store.errors import UsageError
    from rlab.store.reader import StoreReader, resolve_run
    from rlab.tui.app import RolloutLabApp
    from rlab.tui.feed import RunFeed

    existing_run_file(db)
    check_run_file(db, writable=False, pages=False)
    with StoreReader(db) as reader:
        latest = reader.latest_run_id()
        if latest is None:
            raise UsageError(f"no runs in {db} yet (a start that failed records none); start one with "
                             f"`rlab run --db {db}`")
        row = reader.run(latest) if run is None else resolve_run(reader, run)
        RunFeed(reader, row["id"]).poll(watch=False)  # the first screen's reads
    thresholds = None
    if alerts:
        thresholds = checked_thresholds((row.get("config") or {}).get("alerts") or {}, alerts)
    return RolloutLabApp(db, run_id=None if run is None else row["id"], thresholds=thresholds)

