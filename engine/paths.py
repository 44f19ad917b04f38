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
