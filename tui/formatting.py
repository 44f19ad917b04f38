"""Numbers and text cut to fit a table cell or a line, as every screen shows them.

Pure (no textual): the screens and the command line's reports (:mod:`tui.reports`)
share these, so a missing value reads ``-`` and a cut text ends in ``…``
everywhere.
"""

from __future__ import annotations


def clip(text: str | None, width: int) -> str:
    """One line of at most ``width`` characters (newlines shown as ⏎, a cut
    line ends in …); ``""`` for None."""
    line = (text or "").replace("\n", "⏎")
    return line if len(line) <= width else line[: width - 1] + "…"


def fmt(value: float | None, spec: str = ".2f") -> str:
    """A number for a table cell, formatted with ``spec`` (e.g. ``+.3f``,
    ``.4g``, ``.1%``); ``-`` for a missing one."""
    return "-" if value is None else format(value, spec)
