"""The run file's size on disk and how fast it grows (the dashboard header)."""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path

GROWTH_WINDOW_SECONDS = 60.0
"""The growth rate is measured over this many seconds of samples."""


def file_bytes(db_path: Path) -> int:
    """Bytes on disk of the run file with its write-ahead log (``-wal``)."""
    total = 0
    for path in (db_path, db_path.with_name(db_path.name + "-wal")):
        try:
            total += path.stat().st_size
        except OSError:
            pass
    return total


def human_bytes(count: float) -> str:
    """``1536`` -> ``1.5 KB`` (powers of 1024, one decimal from KB on)."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(count) < 1024 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


class FileGrowth:
    """Samples of the run file's size; the rate over the last
    ``window`` seconds.

    Args:
        db_path: the run file.
        window: seconds of samples the rate is measured over.
    """

    def __init__(self, db_path: Path, window: float = GROWTH_WINDOW_SECONDS) -> None:
        self.db_path = db_path
        self.window = window
        self.samples: deque[tuple[float, int]] = deque()

    def sample(self, now: float | None = None) -> int:
        """Measure the size now (bytes) and keep it; called from the poll worker."""
        now = time.monotonic() if now is None else now
        size = file_bytes(self.db_path)
        self.samples.append((now, size))
        while self.samples and now - self.samples[0][0] > self.window:
            self.samples.popleft()
        return size

    def restart(self) -> None:
        """Forget the samples: the rate starts again from the next (a run resumed after a pause)."""
        self.samples.clear()

    def bytes_per_minute(self) -> float | None:
        """Growth in bytes per minute over the window; None with under two
        samples or less than a second between them."""
        if len(self.samples) < 2 or self.samples[-1][0] - self.samples[0][0] < 1.0:
            return None
        (t0, s0), (t1, s1) = self.samples[0], self.samples[-1]
        return (s1 - s0) / (t1 - t0) * 60.0

    def describe(self, with_rate: bool = True) -> str:
        """``12.3 MB`` or, while it grows, ``12.3 MB +1.2 MB/min``; the size
        alone without ``with_rate`` (a run that is not running: the window
        still holds its last minute's growth)."""
        if not self.samples:
            return ""
        shown = human_bytes(self.samples[-1][1])
        rate = self.bytes_per_minute() if with_rate else None
        return f"{shown} +{human_bytes(rate)}/min" if rate and rate > 0 else shown
