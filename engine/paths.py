"""Where the lab keeps what it builds and converts: one cache root.

Imports only the standard library and platformdirs, so a scenario or a
task loader can ask for the cache without pulling in the engine.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import platformdirs


def cache_root() -> Path:
    """Where built models, converted checkpoints and task data live:
    ``$RLAB_CACHE_DIR`` or the user cache dir (``$XDG_CACHE_HOME/rollout-lab``
    through platformdirs). Not created here."""
    override = os.environ.get("RLAB_CACHE_DIR")
    return Path(override) if override else Path(platformdirs.user_cache_dir("rollout-lab"))


def engine_log_path(db_path: Path, run_name: str) -> Path:
    """The engine log of run ``run_name`` of a run file: ``<db>.<run>.engine.log``,
    beside the file (a run name has no path separator: engine.run.config checks it).

    The TUI sends a run's engine output there; the engine appends the traceback
    of an error that ends a run there itself, so a headless run has it too."""
    return db_path.with_name(f"{db_path.name}.{run_name}.engine.log")


def default_run_name(stem: str) -> str:
    """A run's name when none was given: ``{stem}-{YYYYMMDD-HHMMSS}-{4 hex}``
    (e.g. ``arithmetic-20261129-004512-3f9a``), the one style of every name the
    lab chooses, the TUI's, a headless run's and an eval's alike."""
    return f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
