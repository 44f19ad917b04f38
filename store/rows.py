"""Row <-> Python conversions shared by the writer and the reader."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Sequence
from typing import Any, TypedDict


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


def insert_row(db: Any, sql: str, params: Sequence[Any]) -> int:
    """Run one INSERT on ``db`` (a sqlite-utils Database or a sqlite3
    connection) and return the new row's id.

    Raises:
        sqlite3.Error: as ``execute`` does; RuntimeError if no row was written.
    """
    rowid = db.execute(sql, params).lastrowid
    if rowid is None:
        raise RuntimeError(f"no row was inserted by: {sql[:60]}...")
    return int(rowid)


# --------------------------------------------------------------------------
# Typed rows: what StoreReader hands the TUI. Rows are plain dicts at run
# time (JSON columns decoded); these types name their keys for readers and
# the type checker. A later migration may add keys; none is ever removed.


class _RunColumns(TypedDict):
    id: int
    name: str
    kind: str
    scenario: str
    status: str
    pid: int | None
    host: str | None
    created_at: float
    ended_at: float | None
    heartbeat_at: float | None
    last_step: int | None
    reward_file: str | None
    parent_id: int | None
    fork_step: int | None


class RunRow(_RunColumns):
    """A ``runs`` row (``StoreReader.run``); times in Unix seconds."""

    config: dict[str, Any]
    manifest: dict[str, Any]
    summary: dict[str, Any]


class RunSummaryRow(_RunColumns):
    """A row of ``StoreReader.runs()``: the run without config/manifest, plus
    ``steps`` (training steps stored), ``final_pass_at_1`` (last held-out
    eval), ``alerts`` (alert events) and ``last_alert`` (the newest, as
    ``"kind at step N"``)."""

    steps: int
    final_pass_at_1: float | None
    alerts: int
    last_alert: str | None


class TurnRow(TypedDict):
    """A ``turns`` row: one assistant turn of a multi-step trajectory (GiGPO values)."""

    id: int
    trajectory_id: int
    run_id: int
    step: int
    t: int
    state_key: str | None
    reward: float
    ret: float
    adv_episode: float
    adv_step: float
    advantage: float
    anchor_id: int
    anchor_size: int
    env_reward: float | None


class ToolCallRow(TypedDict):
    """A ``tool_calls`` row of a trajectory (``arguments`` decoded)."""

    turn: int
    idx: int
    call_id: str
    name: str
    arguments: dict[str, Any]
    result: str
    error: str | None
    seconds: float


class TrajectoryRow(TypedDict):
    """A full ``trajectories`` row (messages, components, details decoded); ``tool_calls``
    counts its calls (None: no tools offered), ``calls`` lists them (``StoreReader.group``
    and ``StoreReader.trajectory`` fill it in)."""

    id: int
    group_id: int
    run_id: int
    step: int
    idx: int
    messages: list[dict[str, Any]]
    completion: str
    prompt_tokens: int
    completion_tokens: int
    reward: float | None
    components: dict[str, float]
    details: dict[str, Any]
    parse_status: str | None
    advantage: float | None
    reward_version: int | None
    judge_score: float | None
    judge_rank: int | None
    judge_explanation: str | None
    truncated: int
    success: int | None
    tool_calls: int | None
    calls: list[ToolCallRow]


class InspectedTrajectoryRow(TrajectoryRow):
    """``StoreReader.trajectory``: the row plus its group's fields and its turns."""

    prompt: str
    example_id: str | None
    example: dict[str, Any] | None
    judge_status: str | None
    initial_state_key: str | None
    turns: list[TurnRow]


class TrajectorySummary(TypedDict):
    """The per-trajectory columns ``StoreReader.groups_of_step`` lists."""

    id: int
    idx: int
    reward: float | None
    advantage: float | None
    parse_status: str | None
    completion_tokens: int
    truncated: int
    judge_score: float | None
    judge_rank: int | None
    success: int | None
    tool_calls: int | None


class _GroupColumns(TypedDict):
    id: int
    run_id: int
    step: int
    idx: int
    example_id: str | None
    prompt: str
    initial_state_key: str | None
    judge_status: str | None
    judge_error: str | None
    superseded: int
    example: dict[str, Any] | None


class StepGroupRow(_GroupColumns):
    """A group of ``StoreReader.groups_of_step``, with its trajectories' summaries."""

    trajectories: list[TrajectorySummary]


class JudgeCallSummary(TypedDict):
    """The latest ``judge_calls`` row of a group: seconds, tokens, how it asked for JSON."""

    latency_s: float | None
    prompt_tokens: int
    completion_tokens: int
    response_mode: str | None
    attempts: int | None


class GroupRow(_GroupColumns):
    """``StoreReader.group``: the group row with its full trajectory rows and
    its judge call (None without a judge)."""

    trajectories: list[TrajectoryRow]
    judge_call: JudgeCallSummary | None


class EventRow(TypedDict):
    """An ``events`` row, ``payload`` decoded."""

    id: int
    run_id: int
    step: int | None
    kind: str
    payload: dict[str, Any]
    created_at: float
