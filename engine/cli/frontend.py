"""The TUI, as the command line reaches it: a frontend registered by entry point.

The engine never imports the TUI (tests/test_layering.py), so ``rlab run``
without ``--headless`` and ``rlab watch`` find the app through the
``rlab.frontend`` entry-point group; the ``tui`` package registers
``rlab.tui.launch:TextualFrontend`` there (pyproject.toml).
"""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path
from typing import Protocol

from rlab.engine.cli.errors import CliError

FRONTEND_GROUP = "rlab.frontend"


class Frontend(Protocol):
    """What the command line asks of the TUI. Each call returns when the user quits it."""

    def open_run(self, db: Path, name: str, command: list[str]) -> None:
        """Spawn ``command`` (an engine or an importer that writes run ``name`` of
        ``db``) and show the run as it is written."""

    def watch(self, db: Path, run: str | None, alerts: list[str]) -> None:
        """Show run ``run`` of ``db`` (a name or id; None: the latest), with the
        ``--alert NAME=VALUE`` overrides ``alerts``.

        Raises:
            FileNotFoundError, UsageError, RunNotFoundError, rlab.store.db.RunFileError:
                no file, no runs or a bad ``--alert``, no such run, or a damaged file.
        """


def frontend() -> Frontend:
    """The registered frontend (the first in :data:`FRONTEND_GROUP`).

    Raises:
        CliError: none is installed.
    """
    found = list(entry_points(group=FRONTEND_GROUP))
    if not found:
        raise CliError(f"no TUI is installed (no {FRONTEND_GROUP!r} entry point): reinstall rollout-lab "
                       "(pip install -e .), or pass --headless")
    frontend_class: type[Frontend] = found[0].load()
    return frontend_class()
