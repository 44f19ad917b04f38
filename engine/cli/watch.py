"""``rlab watch``: the TUI on a run in a file, or on a trainer's folder imported as it is written."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from rlab.engine.cli.parsers import Command, Subparsers, add_db, folder
from rlab.engine.run.flags import assignments, validation_message

if TYPE_CHECKING:  # the alerts import RunConfig, which `rlab watch` pays for only with --alert
    from rlab.engine.alerts.thresholds import AlertThresholds


def add_parsers(sub: Subparsers) -> None:
    """Add ``watch`` and ``follow`` to ``sub``."""
    watch = sub.add_parser("watch", help="attach the TUI to a run in a file")
    add_db(watch)
    watch.add_argument("run", nargs="?", help="run name or id (default: the latest)")
    watch.add_argument("--alert", action="append", default=[], metavar="NAME=VALUE",
                       help="override an alert threshold of the run config while watching")
    watch.add_argument("--follow", type=folder, metavar="DIR",
                       help="import a TRL output_dir / verl rollout dir as it is written, and watch it")
    add_follow_parser(sub)


def add_follow_parser(sub: Subparsers) -> None:
    """Add ``follow``, the importer that ``watch --follow`` starts in the background."""
    follow = sub.add_parser("follow", help="import a trainer's folder into a run as its files appear, until "
                            "stopped (what `rlab watch --follow` runs in the background)")
    follow.add_argument("source", type=Path, help="the trainer's output folder")
    add_db(follow)
    follow.add_argument("--name", required=True, help="the run to create")
    # the importer checks the format (store.formats.follow.FOLLOWABLE): importing it here costs every command 0.4 s
    follow.add_argument("--format", help="the folder's format, trl, verl or art (default: detected)")
    follow.add_argument("--interval", type=float, default=0.5, help="seconds between polls (%(default)s)")
    follow.add_argument("--idle-exit", type=float, help="stop after this many seconds without a new file")


def cmd_follow(args: argparse.Namespace) -> int:
    """``rlab follow DIR --db FILE --name NAME``: import until stopped (``store.formats.follow``)."""
    from rlab.store.formats.follow import Follower

    Follower(args.source, args.db, args.name, args.format).run(interval=args.interval, idle_exit=args.idle_exit)
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    """``rlab watch [RUN]`` or ``rlab watch --follow DIR [NAME]``."""
    from rlab.engine.cli.frontend import frontend

    if args.follow is None:
        frontend().watch(args.db, args.run, args.alert)
        return 0
    name = _follow_name(args.follow, args.db, args.run)
    frontend().open_run(args.db, name, follower_command(args.follow, args.db, name))
    return 0


def _follow_name(source: Path, db: Path, name: str | None) -> str:
    """The run name for ``--follow source``, once the folder and the run file are usable.

    Raises:
        FileNotFoundError: ``source`` is no folder. UsageError: a bad name.
        CliError: the run file cannot be written.
    """
    from rlab.engine.cli.checks import check_run_file
    from rlab.engine.paths import default_run_name
    from rlab.store.records import check_run_name

    try:
        is_folder = source.is_dir()
    except OSError as err:  # a name too long for the file system, say
        raise FileNotFoundError(f"--follow {str(source)!r}: not a folder ({err.strerror}); pass the trainer's "
                                "output_dir") from None
    if not is_folder:
        raise FileNotFoundError(f"--follow {str(source)!r}: no such folder; pass the trainer's output_dir")
    if name is not None:
        check_run_name(name)
    check_run_file(db, writable=True)
    return name or default_run_name(f"{source.resolve().name}-follow")


def follower_command(source: Path, db: Path, name: str) -> list[str]:
    """The importer that fills run ``name`` of ``db`` from the trainer folder ``source``
    as files appear (``rlab follow``; the TUI spawns it)."""
    return [sys.executable, "-P", "-m", "rlab.engine.cli", "follow", str(source), "--db", str(db), "--name", name]


def checked_thresholds(stored: dict[str, Any], words: list[str]) -> AlertThresholds:
    """A run's stored alert thresholds with ``--alert NAME=VALUE`` overrides ``words``,
    checked as ``rlab run --alert`` checks them (RunConfig).

    Raises:
        UsageError: one line naming a bad word, or the bad names and the known ones.
    """
    from rlab.engine.alerts.thresholds import AlertThresholds
    from rlab.engine.run.config import RunConfig
    from rlab.store.errors import UsageError

    try:
        given = assignments(words, example="--alert length_drift=0.3")
    except ValueError as err:
        raise UsageError(f"--alert {err}") from None
    try:
        return AlertThresholds.model_validate(RunConfig(alerts=stored | given).alerts)
    except ValidationError as err:
        raise UsageError(validation_message(err)) from None


#: This group's handlers by command name.
COMMANDS: dict[str, Command] = {"watch": cmd_watch, "follow": cmd_follow}
