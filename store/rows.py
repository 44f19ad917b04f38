"""Row <-> Python conversions shared by the writer and the reader."""

from __future__ import annotations

import json
import os
import sqlite3
from typing import Any


def _builtin(value: Any) -> Any:
    """JSON fallback: numpy scalars via ``.item()``, paths as strings."""
    item = getattr(value, "item", None)
    if callable(item):
        return item()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(f"{type(value).__name__} is not JSON-serialisable")


# Built once: json.dumps with options builds a new encoder on every call,
# which is a third of the ingest cost of a trajectory.
_STRICT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_builtin,
                           allow_nan=False)
_LENIENT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=_builtin)


def dumps(value: Any, what: str) -> str:
    """Compact JSON text of ``value``; ``what`` names it in the error.

    NaN and infinities are written as ``null`` (they are not JSON).

    Raises:
        ValueError: ``value`` is not JSON-serialisable (e.g. a set, a
            circular reference).
    """
    try:
        return _STRICT.encode(value)
    except ValueError:
        return _LENIENT.encode(_finite(value))
    except TypeError as error:
        raise ValueError(f"{what} is not JSON-serialisable ({error}); pass plain "
                         "dicts, lists, strings and numbers") from error


def _finite(value: Any) -> Any:
    """``value`` with non-finite floats replaced by None, recursively."""
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def fetch_dicts(cursor: sqlite3.Cursor, json_columns: tuple[str, ...] = ()) -> list[dict]:
    """All rows of ``cursor`` as dicts, decoding the named JSON text columns."""
    keys = [column[0] for column in cursor.description]
    rows = [dict(zip(keys, row)) for row in cursor.fetchall()]
    decode = [key for key in json_columns if key in keys]
    if decode:
        for row in rows:
            for key in decode:
                if row[key] is not None:
                    row[key] = json.loads(row[key])
    return rows


def fetch_dict(cursor: sqlite3.Cursor, json_columns: tuple[str, ...] = ()) -> dict | None:
    """The first row of ``cursor`` as a dict (see ``fetch_dicts``), or None."""
    rows = fetch_dicts(cursor, json_columns)
    return rows[0] if rows else None
