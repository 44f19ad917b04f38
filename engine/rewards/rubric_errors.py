"""What is wrong with a reward file, and on which of its lines.

Loading (``engine.rewards.rubric``), editing WEIGHTS
(``engine.rewards.weights_source``) and scoring
(``engine.rewards.score_result``) all report problems against the reward
file's lines; this is the one place that says how.
"""

from __future__ import annotations

import traceback
import types
from pathlib import Path

from rlab.store.errors import UsageError


class RubricError(UsageError):
    """A reward file that cannot be used as a rubric.

    Attributes:
        kind: ``"syntax"`` (does not compile), ``"import"`` (an import in the
            file failed), ``"exception"`` (the module raised while loading),
            ``"weights"`` (no reward function, or WEIGHTS wrong) or
            ``"signature"`` (a function fits none of the signatures of
            ``engine.rewards.signatures``).
        lineno: 1-based line in the reward file the problem is on, or None.
    """

    def __init__(self, message: str, *, kind: str, lineno: int | None = None):
        super().__init__(message)
        self.kind = kind
        self.lineno = lineno


def line_of(tb: types.TracebackType | None, filename: str) -> int | None:
    """Line of the innermost traceback frame that runs in ``filename`` (the
    name the reward file was compiled under), or None."""
    line = None
    for frame, lineno in traceback.walk_tb(tb):
        if frame.f_code.co_filename == filename:
            line = lineno
    return line


def where(filename: str, line: int | None) -> str:
    """``" (rewards.py line N)"`` for the end of an error message, or ``""`` without a line."""
    return f" ({Path(filename).name} line {line})" if line else ""
