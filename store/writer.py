"""The engine's only way into the run file: batched, transactional writes."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import socket
import time
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Callable

import sqlite_utils

from rlab.store.db import open_db, run_owner_alive, write_transaction
from rlab.store.errors import RunNotFoundError, UsageError
from rlab.store.group_rows import error_text, insert_group, json_value
from rlab.store.limits import cap_strings
from rlab.store.records import (
    COMMAND_STATUSES,
    EVENT_KINDS,
    RUN_KINDS,
    RUN_STATUSES,
    STEP_METRIC_COLUMNS,
    TERMINAL_STATUSES,
    GroupRecord,
)
from rlab.store.rows import dumps, fetch_dict, fetch_dicts, insert_row
from rlab.store.secrets import scrub, scrub_text, secret_env_values

_STEP_COLUMNS = list(STEP_METRIC_COLUMNS.values())
# Upsert that merges: a step written twice (train metrics, then eval metrics)
# keeps both; a value written again replaces the old one.
_UPSERT_STEP = (
    f"INSERT INTO steps (run_id, step, metrics, created_at, {', '.join(_STEP_COLUMNS)}) "
    f"VALUES (?, ?, ?, ?, {', '.join('?' for _ in _STEP_COLUMNS)}) "
    "ON CONFLICT (run_id, step) DO UPDATE SET "
    "metrics = json_patch(steps.metrics, excluded.metrics), created_at = excluded.created_at, "
    + ", ".join(f"{c} = COALESCE(excluded.{c}, steps.{c})" for c in _STEP_COLUMNS)
)
_RUN_JSON = ("config", "manifest", "summary")


def _noop_when_disabled(result: Callable[[], Any] = lambda: None):
    """Make a method return ``result()`` at once when the writer is disabled."""

    def wrap(method):
        @functools.wraps(method)
        def inner(self, *args, **kwargs):
            if not self.enabled:
                return result()
            return method(self, *args, **kwargs)

        return inner

    return wrap


def _metric(name: str, value: Any) -> float | None:
    """A hot metric as a float, or None when missing or not finite."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError) as error:
        raise ValueError(f"metric {name!r} must be a number, got {value!r}") from error
    return number if number == number and abs(number) != float("inf") else None


class RunBusyError(UsageError, RuntimeError):
    """A run another live engine process owns; the message names the process and the fix."""


def refuse_if_busy(run: Mapping[str, Any]) -> None:
    """Raise :class:`RunBusyError` if run row ``run``'s engine process is alive
    (``store.db.run_owner_alive``): nothing else may take the run over."""
    if run_owner_alive(run):
        raise RunBusyError(f"run {run['name']!r} is still running in process {run['pid']}; stop it (or "
                           "kill that process) before resuming it")


class StoreWriter:
    """Writes a run into the SQLite file: one transaction per group or step.

    ``StoreWriter(path, enabled=False)`` opens nothing and every method is a
    cheap no-op returning None (``poll_commands`` returns ``[]``), so the
    store's overhead on the engine can be measured. Config, manifest, event
    and command payloads, judge call text and rubric sources go through
    ``store.secrets.scrub`` before they are written; error texts, details and
    the strings of event payloads are then capped (``store.limits``).

    Resume semantics (``resume_run``): rows are never deleted. Groups of steps
    after the last checkpoint are flagged ``superseded = 1`` (readers and the
    exporter skip them); the step rows after it are moved into the payload of
    a ``resume`` event, so the re-run steps get fresh rows and
    ``(run_id, step)`` stays unique.

    Not thread-safe: use one writer per engine thread.
    """

    def __init__(self, path: str | Path, *, enabled: bool = True) -> None:
        self.path = Path(path)
        self.enabled = enabled
        self.db: sqlite_utils.Database | None = open_db(self.path) if enabled else None

    def close(self) -> None:
        """Close the connection (the WAL is checkpointed by SQLite)."""
        if self.db is not None:
            self.db.close()
            self.db = None

    @property
    def database(self) -> sqlite_utils.Database:
        """The open connection; methods reach it only while enabled (see ``_noop_when_disabled``).

        Raises:
            RuntimeError: the writer was closed.
        """
        if self.db is None:
            raise RuntimeError(f"the writer for {self.path} is closed; open a new StoreWriter")
        return self.db

    def __enter__(self) -> "StoreWriter":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @_noop_when_disabled()
    def start_run(self, name: str, scenario: str, config: dict, manifest: dict, *,
                  reward_file: str | Path | None = None, kind: str = "train") -> int:
        """Create a run with status ``running`` owned by this process; return its id.

        ``kind`` is one of ``RUN_KINDS``: ``train`` (loop C), ``eval`` (loop
        A) or ``select`` (loop B).

        Raises:
            ValueError: a run called ``name`` already exists in the file, or
                ``kind`` is unknown.
        """
        if kind not in RUN_KINDS:
            raise ValueError(f"unknown run kind {kind!r}; use one of {', '.join(RUN_KINDS)}")
        if self.database.execute("SELECT 1 FROM runs WHERE name = ?", [name]).fetchone():
            raise UsageError(
                f"a run named {name!r} already exists in {self.path}; choose another "
                "--name, or continue it with --resume"
            )
        with write_transaction(self.database):
            return self._insert_run(name, scenario, config, manifest, reward_file, kind)

    def _insert_run(self, name: str, scenario: str, config: dict, manifest: dict, reward_file: str | Path | None,
                    kind: str, parent: tuple[int, int] | None = None) -> int:
        now = time.time()
        return insert_row(self.database,
            "INSERT INTO runs (name, scenario, config, manifest, status, pid, host, "
            "created_at, heartbeat_at, reward_file, kind, parent_id, fork_step, last_step) "
            "VALUES (?, ?, ?, ?, 'running', ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [name, scenario, dumps(scrub(config), "config"), dumps(scrub(manifest), "manifest"),
             os.getpid(), socket.gethostname(), now, now,
             None if reward_file is None else str(reward_file), kind, *(parent or (None, None)),
             None if parent is None else parent[1]],
        )

    @_noop_when_disabled()
    def start_fork(self, name: str, scenario: str, config: dict, manifest: dict, *, reward_file: str | Path,
                   parent_id: int, step: int, reward_versions: list[tuple[int, str, dict[str, float]]],
                   pinned: bool = True) -> int:
        """Create a fork of run ``parent_id`` at its checkpoint of step ``step``; return its id.

        One transaction, so a process killed meanwhile leaves no half-made
        run: the run row (status ``running``, ``parent_id``, ``fork_step``,
        ``last_step`` = ``step``), its reward versions ``(version, source,
        weights)`` (the parent's, up to the one in force, then a new file's)
        and a ``fork`` event with ``config["fork"]`` (the lineage). While the
        fork exists, the parent's checkpoint is never pruned (:meth:`checkpoints`).
        ``pinned`` False: the fork starts where the parent itself started (its
        base weights, or its own parent's checkpoint), no checkpoint of its.

        Raises:
            ValueError: a run called ``name`` already exists, or the parent
                has no checkpoint at ``step`` (pruned meanwhile).
        """
        with write_transaction(self.database):
            if self.database.execute("SELECT 1 FROM runs WHERE name = ?", [name]).fetchone():
                raise UsageError(f"a run named {name!r} already exists in {self.path}; choose another --name")
            if pinned and self.database.execute("SELECT 1 FROM checkpoints WHERE run_id = ? AND step = ?",
                                                [parent_id, step]).fetchone() is None:
                raise UsageError(f"the parent run has no checkpoint of step {step} any more (its "
                                 "--keep-checkpoints pruned it while the fork started); fork from another step")
            run_id = self._insert_run(name, scenario, config, manifest, reward_file, "train", (parent_id, step))
            for version, source, weights in reward_versions:
                self.write_reward_version(run_id, version, source, weights)
            self._event(run_id, "fork", config.get("fork") or {}, step, time.time())
            return run_id

    @_noop_when_disabled()
    def resume_run(self, run_id: int) -> dict:
        """Take over run ``run_id`` to continue it from its last checkpoint.

        Sets status ``running`` with this process's pid, supersedes the
        groups and step rows after the checkpoint (see the class doc) and
        records a ``resume`` event. Returns the run row (``config`` and
        ``manifest`` decoded) with ``checkpoint``: ``{"step", "path"}`` of the
        last checkpoint, or None (start again from step 0).

        Raises:
            KeyError: no run ``run_id`` in the file.
            RunBusyError: the run's engine process is still alive (checked
                under the write lock, so of two resumes started at once one
                takes the run and the other is told so).
        """
        now = time.time()
        with write_transaction(self.database):
            run = self._run(run_id)
            refuse_if_busy(run)
            checkpoint = fetch_dict(self.database.execute(
                "SELECT step, path FROM checkpoints WHERE run_id = ? ORDER BY step DESC, id DESC "
                "LIMIT 1", [run_id]))
            cut = -1 if checkpoint is None else checkpoint["step"]
            dropped = fetch_dicts(self.database.execute(
                "SELECT step, metrics FROM steps WHERE run_id = ? AND step > ? ORDER BY step",
                [run_id, cut]), ("metrics",))
            superseded = self.database.execute(
                'UPDATE "groups" SET superseded = 1 WHERE run_id = ? AND step > ? '
                "AND superseded = 0", [run_id, cut]).rowcount
            self.database.execute("DELETE FROM steps WHERE run_id = ? AND step > ?", [run_id, cut])
            payload = {"checkpoint": checkpoint, "previous_status": run["status"],
                       "superseded_groups": superseded, "superseded_steps": dropped}
            self._event(run_id, "resume", payload, None if cut < 0 else cut, now)
            self.database.execute(
                "UPDATE runs SET status = 'running', pid = ?, host = ?, ended_at = NULL, "
                "heartbeat_at = ?, last_step = ? WHERE id = ?",
                [os.getpid(), socket.gethostname(), now, None if cut < 0 else cut, run_id])
        return {**self._run(run_id), "checkpoint": checkpoint}

    @_noop_when_disabled()
    def write_group(self, run_id: int, step: int, group: GroupRecord) -> int:
        """Store a group with its trajectories and turns in one transaction.

        Returns the group's id. Raises ValueError if a messages, components or
        details value is not JSON-serialisable (nothing is written then).
        """
        with write_transaction(self.database):
            return insert_group(self.database.conn, run_id, step, group)

    @_noop_when_disabled(list)
    def write_groups(self, run_id: int, step: int, groups: list[GroupRecord]) -> list[int]:
        """Store all groups of a step in one transaction; return their ids."""
        with write_transaction(self.database):
            return [insert_group(self.database.conn, run_id, step, group) for group in groups]

    @_noop_when_disabled(list)
    def write_step_whole(self, run_id: int, step: int, groups: list[GroupRecord], metrics: dict[str, Any],
                         judge_calls: list[dict[str, Any]] | None = None) -> list[int]:
        """Store one step whole, in one transaction: its groups, one judge call per
        group (``judge_calls[i]``: :meth:`write_judge_call`'s keyword fields for
        group ``i``) and its metrics (:meth:`write_step`); return the group ids.
        A process killed meanwhile leaves the step whole or absent."""
        with write_transaction(self.database):
            group_ids = [insert_group(self.database.conn, run_id, step, group) for group in groups]
            for group_id, call in zip(group_ids, judge_calls or []):
                self.write_judge_call(run_id, group_id, step=step, **call)
            self.write_step(run_id, step, metrics)
            return group_ids

    @_noop_when_disabled()
    def write_step(self, run_id: int, step: int, metrics: dict[str, Any]) -> None:
        """Upsert the metrics of one step and advance the run's ``last_step``.

        ``metrics`` is keyed by TRL names (see ``STEP_METRIC_COLUMNS``); the
        whole dict is kept as JSON, the known ones also in columns. Writing
        the same step again merges: new values replace old ones, others stay.
        NaN and infinite values are stored as missing (NULL), never as text.

        Raises:
            ValueError: a known metric is not a number.
        """
        columns = [_metric(name, metrics.get(name)) for name in STEP_METRIC_COLUMNS]
        now = time.time()
        with write_transaction(self.database):
            self.database.execute(_UPSERT_STEP, [run_id, step,
                                           json_value(metrics, "metrics", secret_env_values()), now,
                                           *columns])
            self.database.execute(
                "UPDATE runs SET last_step = MAX(COALESCE(last_step, -1), ?), heartbeat_at = ? "
                "WHERE id = ?", [step, now, run_id])

    @_noop_when_disabled()
    def write_event(self, run_id: int, kind: str, payload: dict | None = None,
                    step: int | None = None) -> int:
        """Record an event; return its id.

        Raises:
            ValueError: ``kind`` is not one of ``EVENT_KINDS``.
        """
        with write_transaction(self.database):
            return self._event(run_id, kind, payload, step, time.time())

    def _event(self, run_id: int, kind: str, payload: dict | None, step: int | None,
               now: float) -> int:
        if kind not in EVENT_KINDS:
            raise ValueError(f"unknown event kind {kind!r}; use one of {', '.join(EVENT_KINDS)}")
        return insert_row(self.database,
            "INSERT INTO events (run_id, step, kind, payload, created_at) VALUES (?, ?, ?, ?, ?)",
            [run_id, step, kind, dumps(cap_strings(scrub(payload or {})), "event payload"), now],
        )

    @_noop_when_disabled()
    def write_checkpoint(self, run_id: int, step: int, path: str | Path, reason: str | None = None) -> int:
        """Record a checkpoint (state after training step ``step``) and a
        ``checkpoint`` event; return the checkpoint's id. ``reason``: why it was
        taken off the schedule (``alert:KIND``, ``reward_edit``, ``settings``), or None."""
        now = time.time()
        with write_transaction(self.database):
            checkpoint_id = insert_row(self.database,
                "INSERT INTO checkpoints (run_id, step, path, created_at, reason) VALUES (?, ?, ?, ?, ?)",
                [run_id, step, str(path), now, reason])
            self._event(run_id, "checkpoint", {"step": step, "path": str(path),
                                                **({"reason": reason} if reason else {})}, step, now)
        return checkpoint_id

    @_noop_when_disabled(list)
    def checkpoints(self, run_id: int) -> list[dict]:
        """The run's recorded checkpoints by step: ``{"id", "step", "path",
        "eval", "forked", "reason"}``, ``eval`` being the held-out ``eval/pass_at_1``
        stored for that step (None when that step had no eval), ``forked``
        whether a fork started from it (1 or 0), ``reason`` why it was taken
        off the schedule (None: on it)."""
        return fetch_dicts(self.database.execute(
            "SELECT c.id, c.step, c.path, c.reason, s.eval_pass_at_1 AS eval, EXISTS (SELECT 1 FROM runs f "
            "WHERE f.parent_id = c.run_id AND f.fork_step = c.step) AS forked FROM checkpoints c "
            "LEFT JOIN steps s ON s.run_id = c.run_id AND s.step = c.step "
            "WHERE c.run_id = ? ORDER BY c.step, c.id", [run_id]))

    @_noop_when_disabled()
    def forget_checkpoint(self, run_id: int, checkpoint_id: int) -> None:
        """Remove a checkpoint's row (its files are about to be deleted) and
        record a ``checkpoint`` event with ``pruned: true``."""
        with write_transaction(self.database):
            row = fetch_dict(self.database.execute(
                "SELECT step, path FROM checkpoints WHERE id = ? AND run_id = ?",
                [checkpoint_id, run_id]))
            if row is None:
                return
            self.database.execute("DELETE FROM checkpoints WHERE id = ?", [checkpoint_id])
            self._event(run_id, "checkpoint", {**row, "pruned": True}, row["step"], time.time())

    @_noop_when_disabled()
    def write_reward_version(self, run_id: int, version: int, source: str,
                             weights: dict[str, float]) -> str:
        """Store a rubric version; return the sha256 (hex) of its UTF-8 source.

        Writing the same version with the same source again is a no-op.

        Raises:
            ValueError: that version is already stored with another source.
        """
        sha256 = hashlib.sha256(source.encode("utf-8")).hexdigest()
        with write_transaction(self.database):
            stored = self.database.execute(
                "SELECT sha256 FROM reward_versions WHERE run_id = ? AND version = ?",
                [run_id, version]).fetchone()
            if stored is None:
                self.database.execute(
                    "INSERT INTO reward_versions (run_id, version, sha256, source, weights, "
                    "created_at) VALUES (?, ?, ?, ?, ?, ?)",
                    [run_id, version, sha256, scrub_text(source), dumps(weights, "weights"),
                     time.time()])
            elif stored[0] != sha256:
                raise ValueError(
                    f"reward version {version} of run {run_id} is already stored with another "
                    "source; give the edited rubric a new version number")
        return sha256

    @_noop_when_disabled()
    def write_judge_call(self, run_id: int, group_id: int | None, *, request_hash: str,
                         model: str, raw_response: str | None = None,
                         latency_s: float | None = None, prompt_tokens: int = 0,
                         completion_tokens: int = 0, cost_usd: float | None = None,
                         error: str | None = None, step: int | None = None,
                         response_mode: str | None = None, attempts: int | None = None) -> int:
        """Record one judge request (latency in seconds, cost in US dollars,
        ``response_mode`` json_schema / prompt / cache, ``attempts`` HTTP
        requests); return its id. Text fields are scrubbed of credentials, ``error`` capped
        (``store.limits``)."""
        with write_transaction(self.database):
            return insert_row(self.database,
                "INSERT INTO judge_calls (run_id, group_id, step, request_hash, model, "
                "raw_response, latency_s, prompt_tokens, completion_tokens, cost_usd, error, "
                "response_mode, attempts, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [run_id, group_id, step, request_hash, scrub_text(model),
                 None if raw_response is None else scrub_text(raw_response), latency_s,
                 prompt_tokens, completion_tokens, cost_usd, error_text(error, secret_env_values()), response_mode,
                 attempts, time.time()])

    @_noop_when_disabled()
    def write_summary(self, run_id: int, summary: dict[str, Any]) -> None:
        """Store the summary of an eval or select run (JSON: ``n``,
        ``pass_at_1``, ``mean_reward``, ...); ``rlab export`` copies it into
        summary.json. Writing again replaces it.

        Raises:
            ValueError: ``summary`` is not JSON-serialisable.
        """
        with write_transaction(self.database):
            self.database.execute("UPDATE runs SET summary = ? WHERE id = ?",
                             [dumps(scrub(summary), "summary"), run_id])

    @_noop_when_disabled()
    def set_status(self, run_id: int, status: str) -> None:
        """Set the run's status; terminal statuses also set ``ended_at``.

        Raises:
            ValueError: ``status`` is not one of ``RUN_STATUSES``.
        """
        if status not in RUN_STATUSES:
            raise ValueError(f"unknown run status {status!r}; use one of {', '.join(RUN_STATUSES)}")
        ended_at = time.time() if status in TERMINAL_STATUSES else None
        with write_transaction(self.database):
            self.database.execute("UPDATE runs SET status = ?, ended_at = ? WHERE id = ?",
                            [status, ended_at, run_id])

    @_noop_when_disabled()
    def heartbeat(self, run_id: int, step: int) -> None:
        """Note that the engine is alive at ``step`` (sets ``heartbeat_at``)."""
        with write_transaction(self.database):
            self.database.execute(
                "UPDATE runs SET heartbeat_at = ?, last_step = MAX(COALESCE(last_step, -1), ?) "
                "WHERE id = ?", [time.time(), step, run_id])

    @_noop_when_disabled(list)
    def poll_commands(self, run_id: int) -> list[dict]:
        """Pending commands of the run, oldest first: dicts with ``id``,
        ``kind``, ``payload`` (decoded) and ``created_at``."""
        return fetch_dicts(self.database.execute(
            "SELECT id, kind, payload, created_at FROM commands "
            "WHERE run_id = ? AND status = 'pending' ORDER BY id", [run_id]), ("payload",))

    @_noop_when_disabled()
    def resolve_command(self, command_id: int, status: str, message: str | None = None) -> None:
        """Mark a pending command ``applied`` or ``rejected`` (with a message
        the TUI shows).

        Raises:
            ValueError: bad ``status``, or no pending command ``command_id``.
        """
        if status not in COMMAND_STATUSES[1:]:
            raise ValueError(f"resolve a command as 'applied' or 'rejected', not {status!r}")
        with write_transaction(self.database):
            row = self.database.execute("SELECT payload FROM commands WHERE id = ?", [command_id]).fetchone()
            # A set_rewards payload is stored unscrubbed until it has run (store.control);
            # once resolved, the file keeps only the scrubbed copy.
            payload = dumps(scrub(json.loads(row[0] or "{}")), "command payload") if row else None
            updated = self.database.execute(
                "UPDATE commands SET status = ?, message = ?, resolved_at = ?, payload = ? "
                "WHERE id = ? AND status = 'pending'",
                [status, error_text(message, secret_env_values()), time.time(), payload,
                 command_id]).rowcount
        if not updated:
            raise ValueError(f"no pending command with id {command_id}")

    def _run(self, run_id: int) -> dict:
        run = fetch_dict(self.database.execute("SELECT * FROM runs WHERE id = ?", [run_id]), _RUN_JSON)
        if run is None:
            raise RunNotFoundError(f"no run with id {run_id} in {self.path}; list them with `rlab runs`")
        return run
