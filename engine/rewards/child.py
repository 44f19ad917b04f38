"""The parent's side of the one child process that runs user reward code.

Every piece of user reward code (a check of an edit, a dry run, the scoring
of a step) runs in ``python -P -m rlab.engine.rewards.worker``, never in the
engine or the TUI. :class:`UserCodeProcess` starts that child and talks to
it: one JSON request per line on its stdin, one JSON answer per line on a
private copy of its stdout (the request kinds are in the worker's module
doc). The reward check starts one for a single request; the scoring process
(``engine.rewards.scoring_process``) keeps one up between steps.

This is isolation, not a security boundary. The child can be killed and
replaced (a reward call that hangs holding the GIL, a crash); ``RLIMIT_AS``
caps its address space (a 3 GB allocation fails with MemoryError instead of
taking the machine's memory); it runs in an empty temporary working
directory, so relative paths it writes do not land in the user's project;
and it leads its own process group, so what it spawns (a reward file that
starts subprocesses at import) is killed with it. It still runs as the
user, with the user's files, network and environment: ``os.system`` works.
Run reward files you would run yourself.

What reward code prints to stdout or stderr never reaches a terminal or
log raw: a reader thread scrubs it of credentials as a whole stream
(``store.secrets.StreamScrubber``: a key split between two reads is still
one key), keeps the last :data:`STDERR_TAIL_CHARS` (for error messages: a
time-out's stuck line) and passes at most :data:`LOG_BUDGET_BYTES` on to
this process's ``sys.stderr`` (``rlab reward``'s own, or the engine's log)
per :class:`UserCodeProcess`, whatever number of children it starts (a run's
scoring process: a reward that kills its worker every step gets no fresh
allowance with the next one); the rest is dropped with one line saying so.
"""

from __future__ import annotations

import codecs
import collections
import json
import os
import resource
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import Any

from rlab.store.secrets import StreamScrubber

#: Address-space cap of a check or scoring process, MiB (resource.RLIMIT_AS).
DEFAULT_MEMORY_MB = 2048
#: Characters of the child's output kept for error messages (the end of a traceback).
STDERR_TAIL_CHARS = 16 * 1024
#: Bytes of reward code's output passed on to the log, per UserCodeProcess (all its children).
LOG_BUDGET_BYTES = 64 * 1024

#: Child module that serves the requests.
WORKER_MODULE = "rlab.engine.rewards.worker"


def cap_memory(memory_mb: int = DEFAULT_MEMORY_MB) -> Callable[[], None]:
    """A ``preexec_fn`` that caps the child's address space at ``memory_mb`` MiB.

    RLIMIT_AS counts virtual memory, so the cap is above what the child
    touches (Python and its imports reserve more than they use).
    """
    limit = memory_mb * 1024 * 1024

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


class LogAllowance:
    """The bytes of reward code's output one owner may still pass on to the log,
    shared by every child process it starts (thread-safe: a dying child's
    reader and its successor's may run at once).

    Args:
        total: bytes in all.
    """

    def __init__(self, total: int = LOG_BUDGET_BYTES) -> None:
        self.total, self._left = total, total
        #: Whether some output was dropped already (the line saying so is written once).
        self.spent = False
        self._lock = threading.Lock()

    def take(self, data: bytes) -> tuple[bytes, bool]:
        """The part of ``data`` still allowed, and whether ``data`` is where the allowance ran out."""
        with self._lock:
            shown = data[:self._left]
            self._left -= len(shown)
            ran_out = len(shown) < len(data) and not self.spent
            self.spent = self.spent or ran_out
            return shown, ran_out


class OutputTap:
    """Reads a child's output stream on a thread: scrubs it, keeps its tail, logs a bounded share.

    Args:
        stream: the child's stderr pipe (binary).
        log: where the allowed share goes (text), e.g. ``sys.stderr``.
        allowance: the owner's :class:`LogAllowance` (default: a fresh one).
        label: what the child runs, in the line that says output was dropped.
    """

    def __init__(self, stream: Any, log: Any, allowance: LogAllowance | None = None,
                 label: str = "reward code") -> None:
        self._stream, self._log, self._label = stream, log, label
        self._allowance = LogAllowance() if allowance is None else allowance
        # Decoded as one stream: a character split between two reads stays one character.
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._scrubber = StreamScrubber()
        self._tail: collections.deque[str] = collections.deque()
        self._tail_chars = 0
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._pump, daemon=True, name="reward-output")
        self._thread.start()

    def _pump(self) -> None:
        for chunk in iter(lambda: self._stream.read1(8192), b""):
            self._take(self._scrubber.feed(self._decoder.decode(chunk)))
        self._take(self._scrubber.feed(self._decoder.decode(b"", final=True)) + self._scrubber.close())

    def _take(self, text: str) -> None:
        """Keep scrubbed ``text`` in the tail and pass on what the allowance allows."""
        if not text:
            return
        with self._lock:
            self._tail.append(text)
            self._tail_chars += len(text)
            while self._tail_chars - len(self._tail[0]) >= STDERR_TAIL_CHARS:
                self._tail_chars -= len(self._tail.popleft())
        shown, ran_out = self._allowance.take(text.encode("utf-8"))
        if shown:
            self._write(shown.decode("utf-8", "ignore"))
        if ran_out:
            self._write(f"\n[{self._label} printed more than {self._allowance.total} bytes; the rest is not logged]\n")

    def _write(self, text: str) -> None:
        try:
            self._log.write(text)
            self._log.flush()
        except (OSError, ValueError):  # the log went away (closed at exit)
            pass

    def tail(self, wait_s: float = 1.0) -> str:
        """The last :data:`STDERR_TAIL_CHARS` of the output, scrubbed (after the
        stream closed, or ``wait_s`` seconds)."""
        self._thread.join(wait_s)
        with self._lock:
            return "".join(self._tail)[-STDERR_TAIL_CHARS:]


class OutOfStep(Exception):
    """A user-code process wrote a line that is not the awaited answer (it has been killed)."""


class UserCodeProcess:
    """One child process that runs user code; started on first use, replaced after a failure.

    Args:
        memory_mb: address-space cap of the process, MiB.
        log: where the child's output is passed on (default ``sys.stderr``).
        module: the child's module (default the reward worker; the tool
            worker is ``rlab.engine.tools.worker``).
        label: what the child runs, as the log names it.
    """

    def __init__(self, memory_mb: int = DEFAULT_MEMORY_MB, log: Any = None, *, module: str = WORKER_MODULE,
                 label: str = "reward code") -> None:
        self.memory_mb = memory_mb
        self._log = log
        self._module, self._label = module, label
        self._allowance = LogAllowance()
        self._proc: subprocess.Popen[bytes] | None = None
        self._tap: OutputTap | None = None
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        #: Processes killed so far (hangs, crashes, no answer in time).
        self.replaced = 0
        #: The output tail of the last process that died or was killed ("" if none).
        self.last_output = ""
        #: The exit status of the last process that died by itself (None: none did, or we killed it).
        self.exit_status: int | None = None

    def ask(self, request: dict[str, Any], wall_s: float) -> dict[str, Any] | None:
        """Send one request and wait up to ``wall_s`` seconds for its answer.

        Returns:
            The answer, or None when the process died or gave no answer in
            time; it is then killed (with what it spawned) and
            :attr:`last_output` holds the end of what it printed.

        Raises:
            ValueError: the request is not JSON-serialisable.
        """
        try:
            line = json.dumps(request, default=repr) + "\n"
        except (TypeError, ValueError) as exc:
            raise ValueError(f"examples and completions must be JSON-serialisable: {exc}") from None
        proc = self._running()
        stdin, stdout = proc.stdin, proc.stdout
        assert stdin is not None and stdout is not None  # both are pipes
        ready: list[Any] = []
        try:
            stdin.write(line.encode("utf-8"))
            stdin.flush()
            ready, _, _ = select.select([stdout], [], [], wall_s)
            answer = stdout.readline() if ready else b""
        except (BrokenPipeError, OSError):
            answer, ready = b"", [stdout]
        if answer:
            return json.loads(answer)
        if ready:  # end of stream: the process is exiting by itself (a crash, a faulthandler limit)
            try:
                proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        return None

    def ask_with_id(self, request: dict[str, Any], wall_s: float) -> dict[str, Any] | None:
        """:meth:`ask` with a fresh unguessable ``id`` its answer must echo: user code can write to
        the reply pipe (an open descriptor like any other), and a forged line must not answer a
        later request.

        Returns:
            The answer, or None when the process died or gave no answer in time.

        Raises:
            OutOfStep: the next line was not that answer (not JSON, or another id); the process
                is killed, so no stale line outlives it.
            ValueError: the request is not JSON-serialisable.
        """
        request_id = secrets.token_hex(8)
        try:
            answer = self.ask({**request, "id": request_id}, wall_s)
        except (json.JSONDecodeError, UnicodeDecodeError):
            answer = {}
        if answer is not None and (not isinstance(answer, dict) or answer.get("id") != request_id):
            self.kill()
            raise OutOfStep
        return answer

    def _running(self) -> subprocess.Popen[bytes]:
        """The process, started (again) if it is not running."""
        if self._proc is None or self._proc.poll() is not None:
            self.kill()
            self._scratch = tempfile.TemporaryDirectory(prefix="rlab-reward-")
            self._proc = subprocess.Popen(
                [sys.executable, "-P", "-m", self._module], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, cwd=self._scratch.name, preexec_fn=cap_memory(self.memory_mb),
                start_new_session=True)
            self._tap = OutputTap(self._proc.stderr, self._log or sys.stderr, self._allowance, self._label)
        return self._proc

    def kill(self) -> None:
        """Kill the process and its process group (what reward code spawned); a later
        :meth:`ask` starts a new one."""
        if self._proc is not None:
            status = self._proc.poll()
            if status is None:
                self.replaced += 1
            self.exit_status = status
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self._proc.wait()
            for stream in (self._proc.stdin, self._proc.stdout):
                if stream is not None:
                    stream.close()
            if self._tap is not None:
                self.last_output = self._tap.tail()
        if self._scratch is not None:
            self._scratch.cleanup()
        self._proc, self._tap, self._scratch = None, None, None

    def close(self) -> None:
        """Stop the process (a later :meth:`ask` starts a new one)."""
        self.kill()

    @property
    def pid(self) -> int | None:
        """The live process's id, or None."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None
