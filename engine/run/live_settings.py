"""A settings change sent to a live run: checked as the engine will, queued, answered.

``rlab set RUN KEY=VALUE`` and the TUI's ``o`` dialog both send through
:func:`send_settings`, as ``rlab reward`` and the reward editor both submit
through ``engine.rewards.edit.submit``; which options may change, and when,
is ``engine.run.settings``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlab.engine.run.flags import assignments
from rlab.engine.run.settings import SettingsError, checked_for_run
from rlab.store.control import send_command, wait_for_command
from rlab.store.errors import UsageError
from rlab.store.reader import StoreReader, resolve_run


def parse_assignments(pairs: list[str]) -> dict[str, Any]:
    """``rlab set``'s ``KEY=VALUE`` words as option name -> value (strings, checked later).

    Keys are option names with ``_`` or ``-`` (``max-new-tokens``); an alert
    threshold is ``alert.NAME`` (or ``alerts.NAME``), collected into ``alerts``.

    Raises:
        SettingsError: a word without ``=`` or a key, or a setting given twice
            (``lr=1e-3 lr=2e-3``: which one was meant is not for us to guess).
    """
    out: dict[str, Any] = {}
    given_by: dict[str, str] = {}  # setting (alert.NAME for a threshold) -> the word that gave it
    for word in pairs:
        try:
            ((key, value),) = assignments([word], form="KEY=VALUE", example="lr=2e-5 or alert.hack_gap=0.2").items()
        except ValueError as err:
            raise SettingsError(str(err)) from None
        key = key.replace("-", "_")
        head, dot, name = key.partition(".")
        alert = bool(dot) and head in ("alert", "alerts")
        setting = f"alert.{name}" if alert else key
        if setting in given_by:
            raise SettingsError(f"{setting} is given twice ({given_by[setting]}, {word}); give each setting once")
        given_by[setting] = word
        if alert:
            out.setdefault("alerts", {})[name] = value
        else:
            out[key] = value
    return out


def send_settings(db: Path, run: str, words: list[str], wait_s: float = 30.0) -> str:
    """``rlab set`` (and ``o`` in the TUI): check ``words`` (``KEY=VALUE``) against the live
    run as ``engine.run.settings.checked_for_run``, send them, wait up to ``wait_s`` seconds for
    the engine's answer (:func:`rlab.store.control.wait_for_command`); that answer.

    Raises:
        rlab.engine.run.settings.SettingsError: a refused key or value (nothing is sent).
        UsageError: the run is not live, or the engine refused the change.
    """
    with StoreReader(db) as reader:
        row = resolve_run(reader, run)
        if row["status"] not in ("running", "paused"):
            raise UsageError(f"run {row['name']} is {row['status']}: settings change a live run; fork it instead")
        given = parse_assignments(words)
        changes = checked_for_run(row, reader.events(row["id"]), given)
    command_id = send_command(db, row["id"], "set_settings", {"changes": changes})
    resolved = wait_for_command(db, row["id"], command_id, wait_s)
    if resolved is not None and resolved["status"] == "rejected":
        raise UsageError(f"refused: {resolved['message']}")
    answer = (f"sent (command {command_id}); it applies at the run's next step boundary" if resolved is None
              else str(resolved["message"]))
    same = [name for name in given if name not in changes]  # checked_for_run drops what would not change
    return answer + (f" (unchanged, the run has them already: {', '.join(same)})" if same else "")
