"""The engine process the TUI starts, watched until its run appears.

``rlab`` (without ``--headless``) and ``rlab watch --follow`` start a child
process (the engine, or the trainer-folder importer) that creates the run the
app waits for. :class:`EngineSupervisor` spawns it in its own session, so it
outlives the TUI (quitting or closing the terminal never stops training), with
stdout and stderr appended to the run's own log, ``<db>.<run>.engine.log``
(:func:`engine.paths.engine_log_path`). Until the run appears, the app's
poll worker asks :meth:`EngineSupervisor.check` what became of it: the log's
newest line (:class:`EngineProgress`, for the header), or, once, that it
exited before creating the run (:class:`EngineExited`: its exit code and the
log's last lines). The app hands it to the screens in its reactive
``engine_status``.
"""

from __future__ import annotations

import contextlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

from rlab.engine.paths import engine_log_path
from rlab.engine.train.building import marker_path

#: Seconds :meth:`EngineSupervisor.stop` waits for the engine to exit.
STOP_WAIT_S = 10.0
ENGINE_LOG_LINES = 8
"""Lines of the engine log shown when the engine dies before its run appears."""


def last_lines(path: Path, count: int = 1, tail_bytes: int = 4096) -> list[str]:
    """The last ``count`` non-empty lines of a log file (progress bars end
    lines with \\r), read from its last ``tail_bytes`` bytes; [] when it
    cannot be read."""
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, path.stat().st_size - tail_bytes))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return []
    lines = [part.strip() for part in text.replace("\r", "\n").split("\n") if part.strip()]
    return lines[-count:]


def last_line(path: Path, tail_bytes: int = 2048) -> str | None:
    """The last non-empty line of a log file; None when it has none or cannot be read."""
    lines = last_lines(path, 1, tail_bytes)
    return lines[-1] if lines else None


@dataclass(frozen=True)
class EngineProgress:
    """The engine is running and wrote a new line: its log's newest non-empty line."""

    line: str


@dataclass(frozen=True)
class EngineExited:
    """The engine exited before its run appeared in the file.

    ``code`` is its exit status (negative: killed by that signal), ``tail``
    the log's last :data:`ENGINE_LOG_LINES` non-empty lines.
    """

    code: int
    run_name: str
    log_path: Path
    tail: tuple[str, ...]

    @property
    def headline(self) -> str:
        """One line for the header and the toast: the exit code, the run, the log's path."""
        return (f"the engine exited with code {self.code} before starting run "
                f"{self.run_name!r}; its log: {self.log_path}")

    @property
    def lines(self) -> list[str]:
        """What the dashboard keeps on screen: the headline, then the log's last lines."""
        return [self.headline, *self.tail]


EngineStatus = EngineProgress | EngineExited
"""What :meth:`EngineSupervisor.check` reports."""


class EngineSupervisor:
    """Starts the engine command and reports on it until its run appears.

    Args:
        cmd: the command line that starts the engine (it creates run ``run_name``).
        db_path: the run file; the engine's output goes to ``<db_path>.<run_name>.engine.log``.
        run_name: the run the engine will create (named in :class:`EngineExited`).
    """

    def __init__(self, cmd: list[str], db_path: Path, run_name: str) -> None:
        self.cmd = list(cmd)
        self.db_path = Path(db_path)
        self.run_name = run_name
        self.log_path = engine_log_path(self.db_path, run_name)
        self.process: subprocess.Popen | None = None
        self._line: str | None = None
        self._exit_reported = False

    def spawn(self) -> subprocess.Popen:
        """Start the engine in its own session (so it outlives the TUI), its
        stdout and stderr appended to :attr:`log_path`, no stdin.

        Raises:
            OSError: the log cannot be opened, or the command cannot be run
                (e.g. FileNotFoundError for a missing executable).
        """
        log = open(self.log_path, "ab")
        try:
            self.process = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()
        return self.process

    @property
    def running(self) -> bool:
        """Whether the engine was spawned and has not exited."""
        return self.process is not None and self.process.poll() is None

    def stop(self, wait_s: float = STOP_WAIT_S) -> None:
        """SIGTERM the engine and wait up to ``wait_s`` seconds for it to exit (a run records its
        stop; a build ends at once: ``engine.train.building``). Blocks: call it off the UI thread."""
        if self.process is None:
            return
        self.process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(wait_s)
        if self.process.poll() is not None:  # a build ended by SIGTERM had no time to remove its marker
            marker_path(self.db_path, self.run_name).unlink(missing_ok=True)

    def check(self) -> EngineStatus | None:
        """What is new with the engine (reads its log: call it off the UI thread).

        :class:`EngineProgress` when the log has a new last line while it runs;
        :class:`EngineExited` once, when it has exited; None when nothing is
        new, when it was never spawned, and after its exit was reported.
        """
        if self.process is None or self._exit_reported:
            return None
        if self.process.poll() is None:
            line = last_line(self.log_path)
            if line and line != self._line:
                self._line = line
                return EngineProgress(line)
            return None
        self._exit_reported = True
        return EngineExited(self.process.returncode, self.run_name, self.log_path,
                            tuple(last_lines(self.log_path, ENGINE_LOG_LINES)))
