"""The child side of the user-code processes' protocol: one JSON request per line in, one answer out.

The reward, tool and agent workers (``engine.rewards.worker``,
``engine.tools.worker``, ``engine.agent.worker``) serve the same way: the
answers go to a private copy of stdout, and file descriptor 1 and
``sys.stdout`` become stderr, so what user code prints reaches the parent's
scrubbed log and never corrupts an answer.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn


def serve(answer: Callable[[dict[str, Any]], dict[str, Any]]) -> NoReturn:
    """Answer each stdin line with ``answer`` until stdin closes, then exit at once
    (``os._exit``: a thread user code abandoned must not delay the exit)."""
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        replies.write(json.dumps(answer(json.loads(line)), default=repr) + "\n")
        replies.flush()
    os._exit(0)
