"""The control channel, both ends: the TUI queues commands, the engine resolves them.

Commands are rows in the run file's ``commands`` table. The TUI (or
``rlab``'s shell commands) writes them with :func:`send_command`; the engine's
:class:`Controller` reads them at safe points (between groups and at step
boundaries), resolves each one as ``applied`` or ``rejected`` with a message,
and records pauses and resumes as events, so every state change is visible in
the run file.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import sqlite_utils

from rlab.store.db import open_db, write_transaction
from rlab.store.errors import RunNotFoundError
from rlab.store.reader import StoreReader
from rlab.store.records import COMMAND_KINDS
from rlab.store.rows import dumps, insert_row
from rlab.store.secrets import scrub
from rlab.store.writer import StoreWriter


def _check(kind: str, payload: dict | None) -> None:
    if kind not in COMMAND_KINDS:
        raise ValueError(f"unknown command {kind!r}; use one of {', '.join(COMMAND_KINDS)}")
    if kind == "set_rewards":
        if (not isinstance(payload, dict) or not isinstance(payload.get("source"), str)
                or not isinstance(payload.get("weights"), dict)):
            raise ValueError(
                "set_rewards needs payload {'source': <rubric file text>, "
                "'weights': {function name: weight}}")
    if kind == "set_settings" and (not isinstance(payload, dict) or not isinstance(payload.get("changes"), dict)):
        raise ValueError("set_settings needs payload {'changes': {setting: value}}")


def _stored_payload(kind: str, payload: dict) -> dict:
    """What is written to the commands table: executable payloads as they are, the rest scrubbed."""
    return payload if kind == "set_rewards" else scrub(payload)


def send_command(path_or_db: str | Path | sqlite_utils.Database, run_id: int, kind: str,
                 payload: dict | None = None) -> int:
    """Queue a ``pending`` command for run ``run_id``; return its id.

    ``kind`` is one of ``COMMAND_KINDS``: ``pause``, ``resume``, ``step`` (run
    one step, then pause), ``stop``, ``set_rewards`` (payload ``source``: the
    rubric file's text, ``weights``: function name -> weight),
    ``set_settings`` (payload ``changes``: run setting -> value, checked by
    the engine as ``rlab set`` checked them). Payloads are
    scrubbed of credentials, except ``set_rewards``: it is code the engine
    will run, and scrubbing by key name would turn the weight of a function
    named ``answer_key`` into "REDACTED". The engine scrubs it when it
    resolves the command (``StoreWriter.resolve_command``), so it is not
    kept in the file.

    Raises:
        ValueError: unknown kind, bad ``set_rewards`` payload.
        KeyError: no run ``run_id`` in the file.
    """
    _check(kind, payload)
    db = path_or_db if isinstance(path_or_db, sqlite_utils.Database) else open_db(
        path_or_db, create=False)
    try:
        if db.execute("SELECT 1 FROM runs WHERE id = ?", [run_id]).fetchone() is None:
            raise RunNotFoundError(f"no run with id {run_id}; list them with `rlab runs`")
        with write_transaction(db):
            return insert_row(db,
                "INSERT INTO commands (run_id, kind, payload, status, created_at) "
                "VALUES (?, ?, ?, 'pending', ?)",
                [run_id, kind, dumps(_stored_payload(kind, payload or {}), "command payload"), time.time()],
            )
    finally:
        if db is not path_or_db:
            db.close()


#: How long (seconds) to wait on a paused run: an engine that takes commands while
#: paused (settings; a TRL run's reward edits) answers within it; ours answers a
#: reward edit only at its next step.
PAUSED_WAIT_S = 3.0

#: Run statuses whose engine reads commands.
LIVE_STATUSES = ("running", "paused")


def wait_for_command(db: str | Path, run_id: int, command_id: int, wait_s: float) -> dict | None:
    """The command row once the engine resolved it (``status`` applied or rejected,
    ``message``), or None: not resolved within ``wait_s`` seconds while the run runs
    (:data:`PAUSED_WAIT_S` while it is paused), or the run stopped."""
    start = time.monotonic()
    with StoreReader(db) as reader:
        while True:
            run = reader.run(run_id)
            status = None if run is None else run["status"]
            command = next((c for c in reader.commands(run_id) if c["id"] == command_id), None)
            if command is not None and command["status"] != "pending":
                return command
            limit = wait_s if status == "running" else min(wait_s, PAUSED_WAIT_S)
            if status not in LIVE_STATUSES or time.monotonic() - start >= limit:
                return None
            time.sleep(0.2)


@dataclass
class Controller:
    """Tracks pause/step/stop state for one run.

    ``pending_rewards`` holds the payload of the latest ``set_rewards``
    command until the run loop applies it at the next step boundary;
    ``pending_settings`` the ``set_settings`` commands not yet applied,
    oldest first (each is a change of its own, applied in order).
    ``tell``: called with one line for a person each time the run pauses,
    resumes, single-steps or stops (a headless run prints it).
    ``paused_seconds``: wall seconds spent waiting while paused (a run's
    seconds of training and its time budget leave them out).
    """

    writer: StoreWriter
    run_id: int
    paused: bool = False
    stop: bool = False
    step_once: bool = False
    pending_rewards: tuple[int, dict] | None = None
    pending_settings: list[tuple[int, dict]] = field(default_factory=list)
    tell: Callable[[str], None] = field(default=lambda line: None)
    poll_interval_s: float = 0.1
    paused_seconds: float = 0.0
    # A set_rewards command stays pending in the table until the step
    # boundary applies it; commands already taken are not taken twice.
    taken: set[int] = field(default_factory=set)

    def poll(self, step: int) -> int:
        """Read and apply every pending command not yet taken (non-blocking); how many it took."""
        taken = 0
        for command in self.writer.poll_commands(self.run_id):
            if command["id"] not in self.taken:
                self.taken.add(command["id"])
                self._apply(command, step)
                taken += 1
        return taken

    def _apply(self, command: dict, step: int) -> None:
        kind, cid = command["kind"], command["id"]
        if kind == "set_rewards":
            if self.pending_rewards is not None:
                self.writer.resolve_command(self.pending_rewards[0], "rejected", "superseded by a newer edit")
            self.pending_rewards = (cid, command.get("payload") or {})
            return
        if kind == "set_settings":
            self.pending_settings.append((cid, command.get("payload") or {}))
            return
        if kind not in COMMAND_KINDS:
            self.writer.resolve_command(cid, "rejected", f"unknown command {kind!r}; use one of {', '.join(COMMAND_KINDS)}")
            return
        if kind == "stop" and self.stop:  # a second stop (a shell's beside the TUI's, say) changes nothing
            self.writer.resolve_command(cid, "applied", "a stop was already pending")
            return
        if kind == "stop":
            self.stop = True
            self.tell(f"stopping after step {step} (a stop command)")
        elif kind == "pause":
            self.pause(step, "user")
        elif kind == "resume":
            self.resume(step)
        elif kind == "step":
            self.resume(step, reason="single step")
            self.step_once = True
        self.writer.resolve_command(cid, "applied")

    def pause(self, step: int, reason: str, **payload) -> None:
        """Pause (idempotent) and record a ``pause`` event."""
        if self.paused:
            return
        self.paused = True
        self.writer.set_status(self.run_id, "paused")
        self.writer.write_event(self.run_id, "pause", {"reason": reason, **payload}, step=step)
        self.tell(f"paused after step {step} ({reason})")

    def resume(self, step: int, reason: str = "user") -> None:
        """Resume (idempotent) and record a ``resume`` event."""
        if not self.paused:
            return
        self.paused = False
        self.writer.set_status(self.run_id, "running")
        self.writer.write_event(self.run_id, "resume", {"reason": reason}, step=step)
        self.tell(f"resumed after step {step} ({reason})")

    def end_of_step(self, step: int) -> None:
        """After a single-stepped step, pause again."""
        if self.step_once:
            self.step_once = False
            self.pause(step, "single step done")

    def wait_while_paused(self, step: int, heartbeat: Callable[[], None]) -> None:
        """Block (polling commands) until resumed or stopped; the wait is added to
        :attr:`paused_seconds`.

        ``heartbeat`` (the engine's beat: it marks the run alive, and applies setting
        changes at once) is called as the wait begins and after each poll that took a
        command, not at every poll: a beat writes the run file, and one every
        ``poll_interval_s`` grew its write-ahead log by 40 kB a second for as long as the
        run stayed paused (past SQLite's 4 MB checkpoint while a reader held a snapshot).
        One beat is all liveness needs (``store.db.process_alive`` reads it only to tell
        a reused pid)."""
        start = time.perf_counter()
        beat = True
        while self.paused and not self.stop:
            if beat:
                heartbeat()
            time.sleep(self.poll_interval_s)
            beat = self.poll(step) > 0
        self.paused_seconds += time.perf_counter() - start
