"""Where the lab keeps what it builds and converts: one cache root.

Imports only the standard library and platformdirs, so a scenario or a
task loader can ask for the cache without pulling in the engine.
"""

from __future__ import annotations

import os
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
    beside the file (a run name has no path separator: engine.config checks it).

    The TUI sends a run's engine output there; the engine appends the traceback
    of an error that ends a run there itself, so a headless run has it too."""
    return db_path.with_name(f"{db_path.name}.{run_name}.engine.log")
