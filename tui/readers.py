"""The TUI's store readers and the caches its workers fill.

The UI thread never runs a query (see :mod:`tui.app`). Each kind of worker
(polling, cursor moves, one-off reads) owns a :class:`LockedReader`: its own
:class:`store.reader.StoreReader`, i.e. its own SQLite connection, opened
lazily inside the worker (opening the file may run migrations) and used by one
worker at a time. What a worker reads more than once goes into an
:class:`LRU`, guarded by the same lock.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

from rlab.store.reader import StoreReader


class LockedReader:
    """A lazily opened StoreReader used by one worker at a time
    (``with locked as reader:``); the lock also guards the caches that the
    worker fills while holding it.

    Args:
        path: the run file; it is opened on the first ``with`` (in the
            worker), not here, so the UI thread never touches SQLite.

    Raises (on entering):
        Whatever :class:`store.reader.StoreReader` raises for a file it
        cannot open.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._reader: StoreReader | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> StoreReader:
        self._lock.acquire()
        if self._reader is None:
            self._reader = StoreReader(self._path)
        return self._reader

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


class LRU(OrderedDict):
    """A small least-recently-used cache (bounded, so memory stays flat).

    Args:
        maxsize: entries kept; the least recently used one goes first.
    """

    def __init__(self, maxsize: int) -> None:
        super().__init__()
        self.maxsize = maxsize

    def fetch(self, key: Any, load: Callable[[], Any]) -> Any:
        """The cached value of ``key``, loading it on a miss. Empty results
        (None, []) are not cached: the engine may not have written them yet."""
        if key in self:
            self.move_to_end(key)
            return self[key]
        value = load()
        if value:
            self[key] = value
            if len(self) > self.maxsize:
                self.popitem(last=False)
        return value
