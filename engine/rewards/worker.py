"""The child process that runs user reward code: checks and scores on request.

Run as ``python -P -m rlab.engine.rewards.worker`` by
``engine.rewards.child.UserCodeProcess``. It reads one JSON request per line
on stdin and answers one JSON line on a private copy of stdout (what reward
code prints goes to stderr, which the parent reads). It imports only
``engine.rewards.rubric`` and the small modules it is built from, so it
starts fast. Two kinds of request:

- ``{"kind": "score", "source", "filename", "weights", "examples",
  "completions", "timeout_s"}``: score one batch with a rubric version (the
  training run's scoring). Answer ``{"results": [ScoreResult as dict, ...],
  "hung": bool}``, or ``{"failure": message}`` when the source does not
  load. Loaded rubrics are kept by (source, weights), so a step costs one
  JSON round trip, not an import. ``hung`` says a reward call ran past its
  limit and left a thread spinning here: the parent then replaces this
  process.
- ``{"kind": "check", "sources": {name: source}, "groups": [[[example,
  completion], ...], ...], "timeout_s", "filename"}``: load each source and
  score every group (a reward edit's check and dry run). Answer
  ``{name: {"results": [[ScoreResult as dict, ...], ...], "weights", "sha256"}
  | {"failure": {"kind", "message", "lineno"}}}``. Loading gets ``timeout_s``
  and scoring all groups :func:`scoring_limit`, both enforced by
  ``faulthandler.dump_traceback_later(exit=True)``, which needs no GIL (so
  it also stops a hang in C code, e.g. a runaway regex) and prints the stuck
  line for the parent to report; the process then exits.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import json
from typing import Any

from rlab.engine.rewards.reply_pipe import serve
from rlab.engine.rewards.rubric import Rubric, load_rubric
from rlab.engine.rewards.rubric_errors import RubricError


def scoring_limit(timeout_s: float) -> float:
    """Seconds allowed for scoring every group of one request: 4 x the per-call limit."""
    return 4 * timeout_s


def _rubric(cache: dict[str, Rubric], request: dict[str, Any]) -> Rubric:
    key = json.dumps([request["source"], request["weights"]])
    if key not in cache:
        rubric = load_rubric(request["source"], filename=request["filename"])
        cache[key] = rubric.with_weights(request["weights"]) if request["weights"] else rubric
    return cache[key]


def score(cache: dict[str, Rubric], request: dict[str, Any]) -> dict[str, Any]:
    """The answer to a ``score`` request (see the module doc)."""
    try:
        rubric = _rubric(cache, request)
    except RubricError as exc:
        return {"failure": str(exc)}
    results = rubric.score_group(request["examples"], request["completions"], request["timeout_s"])
    return {"results": [dataclasses.asdict(r) for r in results], "hung": bool(rubric.hung)}


def check_source(source: str, groups: list[list[Any]], timeout_s: float, filename: str) -> dict[str, Any]:
    """Load one source and score every group: the ``check`` answer for that source.

    Args:
        source: reward file text.
        groups: per group, ``[example, completion]`` pairs.
        timeout_s: seconds for the import and for each reward call.
        filename: the file's name in messages.

    Returns:
        ``{"results", "weights", "sha256"}`` or ``{"failure": {...}}`` when
        the file does not load (see :class:`engine.rewards.rubric_errors.RubricError`).
        Exits the process (status 1, traceback on stderr) past a time limit.
    """
    faulthandler.dump_traceback_later(timeout_s, exit=True)  # import-time hangs
    try:
        rubric = load_rubric(source, filename=filename)
    except RubricError as exc:
        return {"failure": {"kind": exc.kind, "message": str(exc), "lineno": exc.lineno}}
    finally:
        faulthandler.cancel_dump_traceback_later()
    faulthandler.dump_traceback_later(scoring_limit(timeout_s), exit=True)
    try:
        results = [
            [dataclasses.asdict(r) for r in rubric.score_group([e for e, _ in g], [c for _, c in g], timeout_s)]
            for g in groups
        ]
    finally:
        faulthandler.cancel_dump_traceback_later()
    return {"results": results, "weights": rubric.weights, "sha256": rubric.sha256}


def answer(cache: dict[str, Rubric], request: dict[str, Any]) -> dict[str, Any]:
    """The reply to one request of either kind."""
    if request["kind"] == "check":
        return {name: check_source(source, request["groups"], request["timeout_s"], request["filename"])
                for name, source in request["sources"].items()}
    return score(cache, request)


def main() -> None:
    """Serve requests until stdin closes (``engine.rewards.reply_pipe``)."""
    cache: dict[str, Rubric] = {}
    serve(lambda request: answer(cache, request))


if __name__ == "__main__":
    main()
