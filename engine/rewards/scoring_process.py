"""Score the run's reward functions in a persistent worker process that can be killed.

The engine never runs user reward code in its own process: a
:class:`ProcessRubric` has the interface of :class:`engine.rewards.rubric.Rubric`
(``source``, ``sha256``, ``weights``, ``score_group``) but sends each batch to
a :class:`ScoringProcess` (``python -P -m rlab.engine.rewards.worker``,
memory-capped, in a scratch directory; see ``engine.rewards.child``).
The process stays up between steps (one JSON round trip per batch; the
cost is measured by tests/bench/rubric.py). When a reward call hangs, the
worker's own watchdog reports it and the process is killed and replaced, so
no thread is left spinning and the next batch gets a fresh process; when
the process gives no answer at all (a hang holding the GIL, a crash), the
parent's wall-clock limit kills it, and every trajectory of the batch
carries the error. Errors are never silent: each ScoreResult says what
failed, and the run loop pauses on them (engine.step).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlab.engine.rewards.child import DEFAULT_MEMORY_MB, UserCodeProcess
from rlab.engine.rewards.rubric import Rubric
from rlab.engine.rewards.score_result import ScoreResult
from rlab.engine.rewards.time_limits import DEFAULT_TIMEOUT_S
from rlab.engine.rewards.worker import scoring_limit


class ScoringProcess:
    """The run's scoring process: one persistent :class:`UserCodeProcess`, replaced after a hang or crash.

    Args:
        memory_mb: address-space cap of the process, MiB.
    """

    def __init__(self, memory_mb: int = DEFAULT_MEMORY_MB) -> None:
        self.child = UserCodeProcess(memory_mb)

    def score(self, rubric: RubricVersion | Rubric, examples: Sequence[Mapping[str, Any]], completions: Sequence[Any],
              timeout_s: float = DEFAULT_TIMEOUT_S) -> list[ScoreResult]:
        """Score ``completions`` with ``rubric`` in the process; one ScoreResult per trajectory.

        Per-call limit ``timeout_s`` seconds (the worker's watchdog); the
        whole batch gets ``scoring_limit(timeout_s) + 5`` seconds of wall
        time before the process is killed.

        Raises:
            ValueError: lengths differ (as Rubric.score_group).
        """
        if len(examples) != len(completions):
            raise ValueError(f"score needs one example per completion: got {len(examples)} and {len(completions)}")
        wall_s = scoring_limit(timeout_s) + 5.0
        reply = self.child.ask({"kind": "score", "source": rubric.source, "filename": rubric.filename,
                                "weights": rubric.weights, "examples": list(examples),
                                "completions": list(completions), "timeout_s": timeout_s}, wall_s)
        if reply is None:
            died = self.child.exit_status
            why = (f"the scoring process died (exit status {died})" if died is not None
                   else f"TimeoutError: the scoring process gave no answer within {wall_s:g} s; killed and replaced")
            return [_failed(why) for _ in completions]
        if "results" not in reply:
            return [_failed(reply["failure"]) for _ in completions]
        if reply["hung"]:
            self.child.kill()  # a hung call's thread still spins in there
        return [ScoreResult(**r) for r in reply["results"]]

    @property
    def replaced(self) -> int:
        """Processes killed so far (hangs, no answer in time)."""
        return self.child.replaced

    def close(self) -> None:
        """Stop the process (a later ``score`` starts a new one)."""
        self.child.close()

    @property
    def pid(self) -> int | None:
        """The live process's id, or None."""
        return self.child.pid


def _failed(message: str) -> ScoreResult:
    details = {"error": message, "error_kind": "timeout" if message.startswith("TimeoutError") else "crash",
               "error_line": None}
    return ScoreResult(reward=0.0, components={}, details=details, error=message)


@dataclass(frozen=True)
class RubricVersion:
    """A reward file version as text: what the scoring process loads (never run in the engine).

    ``weights``: function name -> weight (floats), checked against the file
    by the check process; ``filename``: the name in messages.
    """

    source: str
    weights: dict[str, float]
    filename: str = "rewards.py"

    @property
    def sha256(self) -> str:
        """Hex sha256 of the UTF-8 source."""
        return hashlib.sha256(self.source.encode("utf-8")).hexdigest()


class ProcessRubric:
    """A rubric version whose ``score_group`` runs in a :class:`ScoringProcess`.

    ``rubric`` (a :class:`RubricVersion`, or a loaded Rubric of a trusted
    file) supplies the version's ``source``, ``sha256``, ``weights`` and
    ``filename``; its functions are never called in this process.
    """

    def __init__(self, rubric: RubricVersion | Rubric, process: ScoringProcess) -> None:
        self.rubric = rubric
        self.process = process
        self.source, self.sha256, self.weights = rubric.source, rubric.sha256, rubric.weights
        self.filename = rubric.filename

    def score_group(self, examples: Sequence[Mapping[str, Any]], completions: Sequence[Any],
                    timeout_s: float = DEFAULT_TIMEOUT_S) -> list[ScoreResult]:
        """As :meth:`Rubric.score_group`, in the scoring process."""
        return self.process.score(self.rubric, examples, completions, timeout_s)
