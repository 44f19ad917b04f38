"""The errors a user can fix, which the command line prints as one ``rlab: error:`` line.

A command prints one line, with no traceback, for these, the run file's own
(``store.db.RunFileError``, ``SchemaVersionError``), a file-system error on a
path the user named, and the command line's ``CliError``; anything else is a
bug of ours and keeps its traceback (``engine.cli.errors``). A module raises
one of these where the message names what the user typed and the fix.
"""

from __future__ import annotations


class UsageError(ValueError):
    """A request that cannot be done as asked: a value out of its range, a run not in the
    state the command needs, a file of another tool not in its format. The message
    names the problem and the fix."""


class RunNotFoundError(UsageError, KeyError):
    """No run of that name or id in the file; the message says how to list them.

    A KeyError too, as a lookup by name is; its text is ``args[0]`` (no quotes)."""
