"""What a command prints when it cannot go on: one ``rlab: error:`` line for a user's error.

A user's error is one of the project's own error types (``store.errors.UsageError``
and its subclasses) or a file-system error on a path given; the line names the
problem and the fix. Anything else is a bug of ours and keeps its traceback,
before the start too: a run's error after its start is kept in the engine log
and the error event (``engine.step.RunCrashed``), and :func:`handled`, the one
handler, prints the one line that says where.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import typing
from collections.abc import Callable
from pathlib import Path

from rlab.store.errors import UsageError

ERROR_PREFIX = "rlab: error: "


class CliError(UsageError):
    """A user error the command line finds (an option, a run's state), with its fix;
    printed as one ``rlab: error:`` line, as every ``store.errors.UsageError`` is."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse with usage errors as one ``rlab: error:`` line (exit 2)."""

    def error(self, message: str) -> typing.NoReturn:
        """Print ``rlab: error: MESSAGE (see PROG --help)`` and exit with status 2."""
        self.exit(2, f"{ERROR_PREFIX}{message} (see `{self.prog} --help`)\n")


#: What a user's mistake raises, before or after a start: one of our own user errors (every one
#: derives from ``store.errors.UsageError``: a bad value, file, model, checkpoint, task, reward
#: file, an unknown run, a run in the wrong state or owned by another process, a damaged or newer
#: run file), a file-system error on a path the user gave, or SQLite's on a file that is not a run
#: file. Anything else, a bare ValueError or KeyError among them, is a bug of ours.
USER_ERRORS: tuple[type[BaseException], ...] = (UsageError, OSError, sqlite3.DatabaseError)


def error_line(err: BaseException) -> str:
    """One ``rlab: error:`` line for an expected error (KeyError's quotes dropped),
    scrubbed of credentials: a reward function's error may quote a key."""
    from rlab.store.secrets import scrub_text

    message = err.args[0] if isinstance(err, KeyError) and err.args else err
    return scrub_text(f"{ERROR_PREFIX}{message}")


def handled(command: Callable[[], int], db: Path) -> int:
    """Run a command, its user errors as one ``rlab: error:`` line (exit 2): the one handler
    of every command line of ours (``rlab``, the engine's own entry, the follower). A run that
    crashed after its start (``engine.step.RunCrashed``) prints the line that says where its
    traceback is kept (exit 1); a SIGTERM'd run says how to go on (143), Ctrl-C 130. Any other
    exception propagates, so Python prints its traceback and exits 1.

    Args:
        db: the run file the command reads, to name it when SQLite finds it damaged.
    """
    try:
        return command()
    except USER_ERRORS as err:
        if isinstance(err, sqlite3.DatabaseError) and not isinstance(err, sqlite3.OperationalError):
            from rlab.store.db import read_error

            err = read_error(db, err)
        print(error_line(err), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rlab: interrupted", file=sys.stderr)
        return 130
    except BaseException as err:
        code = _ended_run(err)
        if code is None:
            raise
        return code


def _ended_run(err: BaseException) -> int | None:
    """The exit status of a run the engine ended (crashed after its start: 1, SIGTERM'd: 143),
    its line printed; None for any other exception. engine.step is looked up, not imported:
    a command that never loaded it (and torch) cannot have raised its errors."""
    step = sys.modules.get("rlab.engine.step")
    if step is not None and isinstance(err, step.RunCrashed):
        print(f"{ERROR_PREFIX}{err}", file=sys.stderr)
        return 1
    if step is not None and isinstance(err, step.Terminated):
        notes = getattr(err, "__notes__", None) or ["rlab run --headless --resume NAME"]
        print(f"rlab: {err}: the run is stopped; `{notes[-1]}` continues it", file=sys.stderr)
        return 143
    return None
