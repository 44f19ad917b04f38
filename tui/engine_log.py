"""The engine log's tail on screen (``l`` on the dashboard).

The TUI starts the engine with its output in ``<db>.<run>.engine.log`` (see
:class:`tui.supervisor.EngineSupervisor`): one log per run, so a run's log
holds only its own lines however many runs share the run file. This screen
shows the watched run's log's last lines and follows it as it grows, twice a second, reading only the new bytes (at most
``CHUNK_BYTES`` per tick, so a flood never stalls the UI thread).
"""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Header, Log

TAIL_BYTES = 16384
"""On opening, the last this many bytes of the log are shown."""
CHUNK_BYTES = 65536
"""At most this many new bytes are read per tick."""
MAX_LINES = 2000
"""Lines kept on screen."""


def log_lines(text: str) -> list[str]:
    """Non-empty lines of log text; a progress line redrawn with ``\\r``
    counts as one line per redraw."""
    return [part.rstrip() for part in text.replace("\r", "\n").split("\n") if part.strip()]


class LogTail:
    """Reads what was appended to a file since the last read.

    ``read()`` returns ``None`` while the file does not exist, else the new
    lines (possibly ``[]``); a truncated or replaced file is read again from
    its start. A partial last line waits for its newline (or ``\\r``); the
    line cut by opening mid-file is left out.
    """

    def __init__(self, path: Path, tail_bytes: int = TAIL_BYTES) -> None:
        self.path = path
        self._offset: int | None = None
        self._tail_bytes = tail_bytes
        self._partial = ""
        self._skip_cut_line = False

    def read(self) -> list[str] | None:
        """The complete new lines since the last call (see the class doc)."""
        try:
            size = self.path.stat().st_size
            if self._offset is None or size < self._offset:
                self._offset, self._partial = max(0, size - self._tail_bytes), ""
                self._skip_cut_line = self._offset > 0
            with self.path.open("rb") as handle:
                handle.seek(self._offset)
                data = handle.read(CHUNK_BYTES)
        except OSError:
            return None
        self._offset += len(data)
        text = self._partial + data.decode("utf-8", "replace")
        if self._skip_cut_line:  # opened mid-file: the first line is only its end
            ends = [i for i in (text.find("\n"), text.find("\r")) if i >= 0]
            if not ends:
                return []
            text, self._skip_cut_line = text[min(ends) + 1:], False
        cut = max(text.rfind("\n"), text.rfind("\r")) + 1
        self._partial = text[cut:]
        return log_lines(text[:cut])


class EngineLogScreen(Screen):
    """The tail of an engine log (:func:`engine.paths.engine_log_path`), followed live; ``escape`` goes back."""

    BINDINGS = [Binding("escape,l", "app.pop_screen", "Back")]
    TICK_SECONDS = 0.5

    def __init__(self, log_path: Path) -> None:
        super().__init__()
        self.tail = LogTail(log_path)
        self._missing_shown = False

    def compose(self) -> ComposeResult:
        yield Header()
        yield Log(id="engine-log", max_lines=MAX_LINES, auto_scroll=True)
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.title = "engine log"
        self.sub_title = str(self.tail.path)
        self._follow()
        self.set_interval(self.TICK_SECONDS, self._follow)

    def _follow(self) -> None:
        lines = self.tail.read()
        log = self.query_one(Log)
        if lines is None:
            if not self._missing_shown:
                self._missing_shown = True
                log.write_line(f"no engine log at {self.tail.path}: the TUI writes it for runs it starts "
                               "(rlab run); a run started with --headless logs to its own terminal")
            return
        if lines:
            log.write_lines(lines)
