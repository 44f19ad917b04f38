"""Numbers and text cut to fit a table cell or a line, as every screen shows them.

Pure (no textual): the screens and the command line's reports (:mod:`engine.cli.reports`)
share these, so a missing value reads ``-`` and a cut text ends in ``…``
everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar


def clip(text: str | None, width: int) -> str:
    """One line of at most ``width`` characters (newlines shown as ⏎, a cut
    line ends in …); ``""`` for None."""
    line = (text or "").replace("\n", "⏎")
    return line if len(line) <= width else line[: width - 1] + "…"


def fmt(value: float | None, spec: str = ".2f") -> str:
    """A number for a table cell, formatted with ``spec`` (e.g. ``+.3f``,
    ``.4g``, ``.1%``); ``-`` for a missing one."""
    return "-" if value is None else format(value, spec)


Run = TypeVar("Run", bound=Mapping[str, Any])


def run_tree(runs: Sequence[Run]) -> list[tuple[Run, int]]:
    """The runs in tree order, each followed by its forks (``parent_id``) one level
    deeper: ``(run, depth)``, oldest first at every level."""
    ids = {r["id"] for r in runs}
    children: dict[int | None, list[Run]] = {}
    for r in runs:
        children.setdefault(r.get("parent_id") if r.get("parent_id") in ids else None, []).append(r)
    out: list[tuple[Run, int]] = []

    def walk(parent: int | None, depth: int) -> None:
        for r in children.get(parent, []):
            out.append((r, depth))
            walk(r["id"], depth + 1)

    walk(None, 0)
    return out


def tree_name(run: Mapping[str, Any], depth: int) -> str:
    """A run's name as the tree shows it: a fork indented under its parent, with its fork step."""
    return ("  " * (depth - 1) + f"└ @{run['fork_step']} " if depth else "") + run["name"]


def call_line(name: str, arguments: object) -> str:
    """A tool call as one line: ``multiply(a=482, b=377)`` (arguments as written; JSON text decoded)."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return f"{name}({arguments})"
    if isinstance(arguments, dict):
        return f"{name}({', '.join(f'{k}={json.dumps(v, ensure_ascii=False)}' for k, v in arguments.items())})"
    return f"{name}({arguments!r})"


def message_call_line(call: dict) -> str:
    """An OpenAI-format tool call of an assistant message (``{"function": {"name", "arguments"}}``)
    as :func:`call_line` writes it; ``?`` for a call without a name."""
    function = call.get("function") or {}
    return call_line(function.get("name", "?"), function.get("arguments"))
