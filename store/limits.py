"""Size caps on the free text the run file keeps: error texts and details.

A reward function that raises with a 5 MB message, or returns megabytes of
details, would have that text stored in every trajectory of every step
(a 514 MB run file in 2 steps). The writer caps, on every path into the
file:

- an error text (a group's ``judge_error``, a judge call's ``error``, a
  command's ``message``) and every string inside a trajectory's details or
  an event's payload at :data:`TEXT_CHARS` characters; the rest is replaced
  by a note of how many characters were not stored;
- a trajectory's details at :data:`DETAILS_CHARS` characters of JSON: past
  that, its keys are kept in order, ``error``, ``error_kind``,
  ``error_line`` and ``parse_status`` first, while they fit, and
  ``details_truncated`` says how many were not stored.

Completions, prompts, messages and reward sources are data, not capped.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

TEXT_CHARS = 4096
"""Characters kept of one error text, or of one string in details or an event payload."""
DETAILS_CHARS = 16384
"""Characters kept of one trajectory's details (JSON)."""
FIRST_KEYS = ("error", "error_kind", "error_line", "parse_status")
"""Details keys kept first when a trajectory's details are over :data:`DETAILS_CHARS`."""


def cap_text(text: str) -> str:
    """``text`` cut to :data:`TEXT_CHARS` characters, with a note of what was cut."""
    if len(text) <= TEXT_CHARS:
        return text
    return f"{text[:TEXT_CHARS]} [... {len(text) - TEXT_CHARS:,} more characters not stored]"


def cap_strings(value: Any) -> Any:
    """A copy of a JSON-like value with every string cut by :func:`cap_text`
    (dicts, lists and tuples walked; tuples become lists)."""
    if isinstance(value, str):
        return cap_text(value)
    if isinstance(value, Mapping):
        return {key: cap_strings(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [cap_strings(item) for item in value]
    return value


def cap_details(details: Mapping[str, Any]) -> dict[str, Any]:
    """A trajectory's details within :data:`DETAILS_CHARS` characters of JSON
    (see the module doc for what is kept)."""
    capped = cap_strings(details)
    if _size(capped) <= DETAILS_CHARS:
        return capped
    kept: dict[str, Any] = {}
    room = DETAILS_CHARS - 200  # for the note
    for key in sorted(capped, key=lambda k: k not in FIRST_KEYS):  # stable: the others keep their order
        if _size({**kept, key: capped[key]}) <= room:
            kept[key] = capped[key]
    kept["details_truncated"] = (f"{len(capped) - len(kept)} of {len(capped)} keys not stored: details are "
                                 f"kept up to {DETAILS_CHARS:,} characters")
    return kept


def _size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, default=str))
