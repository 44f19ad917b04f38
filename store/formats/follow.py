"""Follow another trainer's output folder and import each new step file as it appears.

    rlab follow DIR --db FILE --name NAME [--format trl|verl|art]

This is the background importer behind ``rlab watch --follow DIR`` (its
command line is ``engine.cli.watch``'s, with every other command's error
handling): it
creates the run (status ``running``, owned by this process), then polls DIR
every ``--interval`` seconds. A step file is imported once it has kept the
same size and modification time over one poll interval (so a file the
trainer is still writing is never read half-way), each file in one
transaction. It stops after ``--idle-exit`` seconds without a new file
(default: never), on a ``stop`` command (the TUI's quit-and-stop), SIGTERM
or Ctrl-C, and marks the run ``finished``. TRL's logged metrics are only in ``trainer_state.json``,
which TRL writes at checkpoints, so followed TRL steps carry the metrics
computed from their groups (use the TRL callback, rlab.engine.integrations.trl,
for TRL's own metrics live).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rlab.store.db import write_transaction
from rlab.store.errors import UsageError
from rlab.store.formats import art, detect_format, trl, verl
from rlab.store.formats.base import FormatError, ImportedStep
from rlab.store.formats.write import append_steps
from rlab.store.writer import StoreWriter


@dataclass(frozen=True)
class StepSource:
    """How to follow one format: list its step files, read one file as a step."""

    files: Callable[[Path], list[Path]]
    read: Callable[[Path], ImportedStep]


def _art_step(path: Path) -> ImportedStep:
    return art.read(path).steps[0]


FOLLOWABLE: dict[str, StepSource] = {
    trl.NAME: StepSource(trl.completion_files, lambda p: trl.read_step(p, {})),
    verl.NAME: StepSource(verl.step_files, verl.read_step),
    art.NAME: StepSource(art.trajectory_files, _art_step),
}
"""Formats written one file per step, which can be followed."""


@dataclass
class Follower:
    """Imports the new step files of ``source`` into one run of ``db``.

    Args:
        source: the trainer's folder (TRL output_dir, verl rollout_data_dir,
            ART model dir).
        db: the run file.
        name: the run name.
        format: the format; default: detected from the files, else ``trl``
            (an output_dir before its first completions file).
    """

    source: Path
    db: Path
    name: str
    format: str | None = None
    imported: set[Path] = field(default_factory=set)
    _seen: dict[Path, tuple[int, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.format is None:
            try:
                self.format = detect_format(self.source)
            except FormatError:
                self.format = trl.NAME
        if self.format not in FOLLOWABLE:
            raise UsageError(f"cannot follow {self.format!r} output; follow one of "
                             f"{', '.join(FOLLOWABLE)}")
        self.step_source = FOLLOWABLE[self.format]
        self.writer = StoreWriter(self.db)
        self.run_id = self.writer.start_run(
            self.name, self.format, {"follow": str(self.source)},
            {"imported_from": str(self.source), "format": self.format, "followed": True})

    def ready_files(self) -> list[Path]:
        """Step files not imported yet whose size and mtime did not change
        since the previous call."""
        ready = []
        for path in self.step_source.files(self.source):
            if path in self.imported:
                continue
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            mark = (stat.st_size, stat.st_mtime_ns)
            if self._seen.get(path) == mark:
                ready.append(path)
            self._seen[path] = mark
        return ready

    def poll(self) -> int:
        """Import every ready file (one transaction each); return how many.

        Raises:
            FormatError: a stable file is malformed.
        """
        files = self.ready_files()
        for path in files:
            step = self.step_source.read(path)
            with write_transaction(self.writer.database):
                append_steps(self.writer, self.run_id, [step])
                self.writer.heartbeat(self.run_id, step.step)
            self.imported.add(path)
        if not files:
            self.writer.heartbeat(self.run_id, -1)
        return len(files)

    def stop_requested(self) -> bool:
        """Answer the TUI's commands: ``stop`` ends the follow (True); the
        others are rejected, since the trainer being followed is not ours."""
        stop = False
        for command in self.writer.poll_commands(self.run_id):
            if command["kind"] == "stop":
                self.writer.resolve_command(command["id"], "applied")
                stop = True
            else:
                self.writer.resolve_command(command["id"], "rejected",
                                            "a followed run only imports files; control the "
                                            "trainer itself")
        return stop

    def close(self, status: str = "finished") -> None:
        """Mark the run ``status`` and close the file."""
        self.writer.set_status(self.run_id, status)
        self.writer.close()

    def run(self, *, interval: float = 0.5, idle_exit: float | None = None) -> None:
        """Poll until stopped (SIGTERM, Ctrl-C) or ``idle_exit`` seconds pass
        without a new file; then mark the run finished."""
        stop = False

        def _stop(*_):
            nonlocal stop
            stop = True

        signal.signal(signal.SIGTERM, _stop)
        last_new = time.monotonic()
        try:
            while not stop and not self.stop_requested():
                if self.poll():
                    last_new = time.monotonic()
                elif idle_exit is not None and time.monotonic() - last_new > idle_exit:
                    break
                time.sleep(interval)
        except KeyboardInterrupt:
            pass
        except FormatError:
            self.close("failed")
            raise
        self.close()
