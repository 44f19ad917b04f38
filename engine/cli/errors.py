"""What a command prints when it cannot go on: one ``rlab: error:`` line for a user's error.

A user's error is one of the project's own error types, or a bad option or
file found before a run starts; the line names the problem and the fix.
Anything else is a bug of ours and keeps its traceback: a run's error after
its start is kept in the engine log and the error event
(``engine.step.RunCrashed``), and :func:`guarded` prints the one line that
says where.
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import typing
from collections.abc import Callable

from pydantic import ValidationError

from rlab.engine.flags import validation_message
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


def file_errors() -> tuple[type[BaseException], ...]:
    """The errors of the commands that read or write a run file and load no model: the
    project's own user errors (``store.errors``: a bad value, an unknown run, a run in
    the wrong state, another tool's file not in its format), a damaged, foreign or newer
    run file, and a file-system error on a path given. A bare ValueError or KeyError is
    a bug of ours there, and keeps its traceback."""
    from rlab.store.db import RunFileError, SchemaVersionError
    from rlab.store.errors import RunNotFoundError

    return (UsageError, RunNotFoundError, RunFileError, SchemaVersionError, sqlite3.DatabaseError,
            OSError)


def expected_errors() -> tuple[type[BaseException], ...]:
    """:func:`file_errors` and what the engine raises for a bad model, checkpoint, reward
    file, task or server before a run starts, ValueError and KeyError among them (an
    error after the start is ``engine.step.RunCrashed``, with its traceback kept).
    Imports the engine (torch): for the commands that load a model only (run, fork,
    eval, select, serve)."""
    from rlab.engine.policy.model import ModelLoadError
    from rlab.engine.policy.vllm import VLLMError
    from rlab.engine.rewards.rubric_errors import RubricError
    from rlab.engine.train.checkpoint import CheckpointError
    from rlab.store.writer import RunBusyError

    return (*file_errors(), ModelLoadError, RubricError, CheckpointError, VLLMError, RunBusyError, ValueError,
            KeyError)


def error_line(err: BaseException) -> str:
    """One ``rlab: error:`` line for an expected error (KeyError's quotes dropped),
    scrubbed of credentials: a reward function's error may quote a key."""
    from rlab.store.secrets import scrub_text

    message = err.args[0] if isinstance(err, KeyError) and err.args else err
    if isinstance(err, ValidationError):
        message = validation_message(err)
    return scrub_text(f"{ERROR_PREFIX}{message}")


def guarded(command: Callable[[], int]) -> int:
    """Run a ``run`` command, turning expected errors into one line (exit 2)
    and an error that ended a started run into the one line that says where
    its traceback is kept (exit 1; ``engine.step.RunCrashed``)."""
    from rlab.engine.step import RunCrashed, Terminated

    try:
        return command()
    except RunCrashed as err:
        print(f"{ERROR_PREFIX}{err}", file=sys.stderr)
        return 1
    except expected_errors() as err:
        print(error_line(err), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rlab: interrupted", file=sys.stderr)
        return 130
    except Terminated as err:
        notes = getattr(err, "__notes__", None) or ["rlab run --headless --resume NAME"]
        print(f"rlab: {err}: the run is stopped; `{notes[-1]}` continues it", file=sys.stderr)
        return 143
