"""What the command modules share to declare their parsers: the run file option and argument types."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TypeAlias

from rlab.engine.cli.errors import ArgumentParser

DEFAULT_DB = Path("rlab.db")

#: ``ArgumentParser.add_subparsers()``'s result, to which each command module adds its commands.
Subparsers: TypeAlias = "argparse._SubParsersAction[ArgumentParser]"

#: A command's handler: its parsed arguments in, the exit status out.
Command: TypeAlias = Callable[[argparse.Namespace], int]


def add_db(parser: argparse.ArgumentParser) -> None:
    """``--db PATH``: the run file (default ``rlab.db`` in the working folder)."""
    parser.add_argument("--db", type=Path, default=DEFAULT_DB, help="the run file (default: %(default)s)")


def folder(text: str) -> Path:
    """An argparse type: a folder's path, not empty (``Path("")`` is the working folder)."""
    if not text:
        raise argparse.ArgumentTypeError("'' is no folder; pass the trainer's output_dir")
    return Path(text)


def at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``low`` (a bad value is argparse's one error line)."""
    def parse(text: str) -> int:
        if not text.isascii() or not text.lstrip("-").isdigit() or int(text) < low:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= {low}")
        return int(text)

    return parse
