"""A model build before a run starts, findable by the run's name and stoppable at once.

A new run whose policy must be built first (a tiny policy's warm start: minutes
to an hour) has no row in the run file until the build ends, since a failed
start leaves the file as it was. While it builds, a marker beside the file,
``<db>.<run>.building`` (JSON: ``pid``, ``run``, ``started``), says so: ``rlab
stop RUN`` and the TUI's quit find the build through it (:func:`find_build`)
and end it (:func:`stop_build`).

A build is stopped by SIGTERM within a second: inside :func:`building` the
signal has its default action, since a Python handler would run only after
the supervised step in progress (``loss.backward()`` is one call of 4-40 s).
Nothing is lost by that: a build writes its model atomically (a temporary
folder renamed), and the tool process it may have started exits when its
stdin closes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

#: Seconds :func:`stop_build` waits for the build's process to end.
STOP_WAIT_S = 5.0


def marker_path(db_path: Path, run_name: str) -> Path:
    """The marker of run ``run_name``'s build: ``<db>.<run>.building``, beside the run file."""
    return Path(db_path).with_name(f"{Path(db_path).name}.{run_name}.building")


@dataclass(frozen=True)
class Build:
    """A build in progress: run ``run``'s, in process ``pid``, since ``started`` (Unix seconds),
    said by ``marker``."""

    run: str
    pid: int
    started: float
    marker: Path


@contextlib.contextmanager
def building(db_path: Path, run_name: str) -> Iterator[None]:
    """Within the block, this process builds run ``run_name``'s policy: the marker says so and
    SIGTERM ends the process at once (the handler before the block is restored after it)."""
    marker = marker_path(db_path, run_name)
    marker.write_text(json.dumps({"pid": os.getpid(), "run": run_name, "started": time.time()}))
    # signals reach only the main thread's handlers; a build in another thread (a test's) keeps them
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL) if main else None
    try:
        yield
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
        marker.unlink(missing_ok=True)


def find_build(db_path: Path, run_name: str) -> Build | None:
    """Run ``run_name``'s build in progress, or None (no marker, or one whose process is gone:
    a build killed with SIGKILL leaves its marker, removed here, and its pid may be reused)."""
    marker = marker_path(db_path, run_name)
    try:
        found = json.loads(marker.read_text())
    except FileNotFoundError:
        return None
    build = Build(str(found["run"]), int(found["pid"]), float(found["started"]), marker)
    if not _alive(build.pid) or not _ours(build.pid):
        marker.unlink(missing_ok=True)
        return None
    return build


def stop_build(build: Build, wait_s: float = STOP_WAIT_S) -> bool:
    """Send the build's process SIGTERM and wait up to ``wait_s`` seconds; whether it ended (its
    marker removed then: SIGTERM's default action leaves the process no time to remove it)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(build.pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while _alive(build.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(build.pid):
        return False
    build.marker.unlink(missing_ok=True)
    return True


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (a child the caller has not reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process of that pid: alive
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return True  # no /proc (macOS): signal 0 answered, so it is there


def _ours(pid: int) -> bool:
    """Whether process ``pid`` runs rlab (its command line names it), so a marker whose pid was
    reused by another program never gets that program a SIGTERM."""
    try:
        return b"rlab" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no /proc (macOS): trust the marker
