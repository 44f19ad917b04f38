"""``rlab run``, ``rlab fork`` and ``rlab set``: start a run, branch one, change a live one.

``rlab run --headless``, ``rlab fork --headless`` and ``python -P -m
rlab.engine`` (what the TUI spawns) end in :func:`run_headless`; without
``--headless`` the run's engine is that command, spawned by the TUI
(``engine.cli.frontend``).
"""

from __future__ import annotations

import argparse
import signal
import typing
from collections.abc import Sequence
from pathlib import Path

from rlab.engine.cli.checks import check_options
from rlab.engine.cli.errors import ArgumentParser, CliError, handled
from rlab.engine.cli.options import add_fork_arguments, add_run_options, config_from_args, engine_command
from rlab.engine.cli.parsers import DEFAULT_DB, Command, Subparsers, add_db

if typing.TYPE_CHECKING:
    from rlab.engine.run.config import RunConfig

RUN = "run"
FORK = "fork"
#: The commands that take the run options (generated from RunConfig, whose import costs a second).
WITH_RUN_OPTIONS = (RUN, FORK)


def add_parsers(sub: Subparsers, *, run_options: bool) -> None:
    """Add ``run``, ``fork`` and ``set`` to ``sub`` (``run_options=False``: without the
    run options, for a command line that names another command)."""
    run = sub.add_parser(RUN, help="start a run (with the TUI unless --headless)")
    run.add_argument("--headless", action="store_true", help="no TUI; print progress and a JSON summary")
    fork = sub.add_parser(FORK, help="start a new run from a checkpoint of another, with options changed")
    if run_options:
        add_run_options(run)
        add_fork_arguments(fork)
    settings = sub.add_parser("set", help="change a live run's settings at its next step boundary (lr, "
                              "temperature, beta, max_new_tokens, prompts_per_step, eval_every, alert.NAME)")
    settings.add_argument("run", help="run name or id")
    settings.add_argument("changes", nargs="+", metavar="KEY=VALUE", help="e.g. lr=2e-5 alert.hack_gap=0.2")
    add_db(settings)
    settings.add_argument("--wait", type=float, default=30.0,
                          help="seconds to wait for a running run to apply (or refuse) the change")


def cmd_run(args: argparse.Namespace) -> int:
    """``rlab run``: headless, or the TUI spawning the engine's command line."""
    config = config_from_args(args)  # RunConfig checks the --alert thresholds
    check_options(config)
    if args.headless:
        return run_headless(config)
    from rlab.engine.cli.frontend import frontend

    name = run_name(config)
    frontend().open_run(config.db, name, engine_command(args.argv, db=config.db, name=name))
    return 0


def cmd_fork(args: argparse.Namespace) -> int:
    """``rlab fork RUN@STEP [run options]`` is ``rlab run --fork-from RUN@STEP [run options]``."""
    args.argv = ["--fork-from", args.fork_from, *(a for a in args.argv if a != args.fork_from)]
    return cmd_run(args)


def run_name(config: RunConfig) -> str:
    """The name the TUI waits for: ``--name``, the resumed run's, or a new one from the task or scenario."""
    from rlab.engine.paths import default_run_name
    from rlab.store.reader import StoreReader, resolve_run

    if config.resume is not None:
        with StoreReader(config.db) as reader:
            return str(resolve_run(reader, config.resume)["name"])
    return config.name or default_run_name(task_label(config.task) or config.scenario)


def task_label(task: str | dict | None) -> str | None:
    """A run-name stem for ``--task`` without loading the task (the TUI names the
    run before the engine starts): the reference's name, the toml's folder or stem."""
    if task is None:
        return None
    if isinstance(task, dict):
        return str(task.get("name") or task.get("reasoning_gym") or "task")
    kind, _, name = task.partition(":")
    if kind in ("reasoning-gym", "verifiers") and name:
        return Path(name).stem
    path = Path(task)
    return path.parent.name if path.name == "task.toml" else path.stem


def checked_fork(argv: list[str]) -> list[str]:
    """The engine's command line for ``rlab fork`` words ``argv`` (``fork RUN@STEP
    [options]``), once they pass ``rlab fork``'s checks (no model loads): the TUI's
    fork dialog.

    Raises:
        CliError: a refused option or value, an unknown flag, no such checkpoint
            (one line, as ``rlab fork`` prints it).
    """
    class Refusing(ArgumentParser):
        def error(self, message: str) -> typing.NoReturn:
            raise CliError(message)  # in the dialog, not an exit of the TUI

    parser = Refusing(prog="rlab fork")
    add_fork_arguments(parser)
    args, unknown = parser.parse_known_args(argv[1:])
    if unknown:
        raise CliError(f"unrecognized option {unknown[0]} (see `rlab fork --help`)")
    check_options(config_from_args(args))
    return engine_command(["--fork-from", argv[1], *argv[2:]])


def run_headless(config: RunConfig) -> int:
    """Train without the TUI; print progress to stderr and one JSON summary
    line to stdout. Returns the exit status: 0, or 1 for a run that ended ``failed``
    (every reward score of every step failed: nothing was trained).

    stdout and stderr are scrubbed of credentials first (see
    :mod:`store.secrets`), so the engine log the TUI keeps holds no key.
    """
    from rlab.engine.step import Terminated, run, summary_line
    from rlab.store.secrets import scrub_streams

    def terminate(signum: int, frame: object) -> None:
        raise Terminated(f"SIGTERM (signal {signum})")

    scrub_streams()
    quiet_libraries()
    signal.signal(signal.SIGTERM, terminate)  # a kill or a scheduler's stop: record the stop, do not vanish
    summary = run(config)
    print(summary_line(summary))
    return 1 if summary["status"] == "failed" else 0


def quiet_libraries() -> None:
    """Keep the run's log for the run: no progress bars of model loading and saving or dataset
    parsing, no libraries' FutureWarnings about their own next versions (nothing a user of rlab
    can act on); the lab's own progress and alerts stay."""
    import warnings

    from transformers.utils import logging as transformers_logging

    warnings.filterwarnings("ignore", category=FutureWarning)
    transformers_logging.disable_progress_bar()


def engine_main(argv: Sequence[str] | None = None) -> int:
    """``python -P -m rlab.engine [run options]``: ``rlab run --headless``.

    Returns the exit status: 0 after a run, 2 with one ``rlab: error:`` line
    for bad options or files, 130 when interrupted.
    """
    parser = ArgumentParser(prog="python -m rlab.engine",
                            description="The Rollout Lab engine: train headless (rlab run --headless).")
    add_run_options(parser)
    args = parser.parse_args(argv)

    def checked_run() -> int:
        config = config_from_args(args)
        check_options(config)
        return run_headless(config)

    return handled(checked_run, Path(getattr(args, "db", None) or DEFAULT_DB))


def cmd_set(args: argparse.Namespace) -> int:
    """``rlab set RUN KEY=VALUE ...``: check the change as the engine will (``engine.run.settings``),
    send it, and wait for the run to apply it at its next step boundary (a paused run: at once)."""
    from rlab.engine.run.live_settings import send_settings
    from rlab.store.db import existing_run_file

    print(f"run {args.run}: {send_settings(existing_run_file(args.db), args.run, args.changes, args.wait)}")
    return 0


#: This group's handlers by command name.
COMMANDS: dict[str, Command] = {RUN: cmd_run, FORK: cmd_fork, "set": cmd_set}
