"""The engine's gate for a reward edit: the editor's checks, and nothing can fail the run.

A ``set_rewards`` command carries a reward file's text and weights. Before
the engine switches to it, :func:`accept_edit` runs the same check as the
reward editor (``engine.rewards.edit.check.validate``: load the file and score
the last groups' trajectories in a separate, time-limited, memory-capped
process) and checks the payload's weights against the file's functions. Every way this
can fail (syntax, import, exception, NaN or non-numeric reward, time-out,
bad weights, a malformed payload) becomes :class:`EditRejected` with one
message; the caller keeps the version it has.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from rlab.engine.rewards.edit.check import DEFAULT_TIMEOUT_S, validate
from rlab.engine.rewards.scoring_process import RubricVersion
from rlab.engine.rewards.success import SuccessError, SuccessRule
from rlab.store.errors import UsageError
from rlab.store.records import GroupRecord

#: Groups of the last step a new version must score cleanly (the editor's default K).
CHECK_GROUPS = 8


class EditRejected(UsageError):
    """A reward edit the engine will not apply; the message says why and where."""


def check_samples(groups: Sequence[GroupRecord], *, multi_step: bool) -> list[tuple[dict, Any]]:
    """(example, completion) of every trajectory of ``groups``, as the rubric scores them.

    Single-turn rubrics score the completion text, multi-step ones the
    whole transcript (``messages``), as ``engine.rollout.play`` gives them.
    """
    return [(g.example or {"id": g.example_id, "prompt": g.prompt}, t.messages if multi_step else t.completion)
            for g in groups for t in g.trajectories]


def accept_edit(payload: Mapping[str, Any], samples: Sequence[tuple[dict, Any]], *,
                filename: str = "rewards.py", timeout_s: float = DEFAULT_TIMEOUT_S,
                success: SuccessRule | None = None) -> RubricVersion:
    """The rubric version of a ``set_rewards`` payload, once it passed the editor's checks.

    The file is only ever run in the check process and, once accepted, in
    the scoring process (engine.rewards.scoring_process): never in the engine.

    Args:
        payload: ``{"source": str, "weights": {name: weight} | None}``.
        samples: (example, completion) pairs the new version must score to
            finite numbers, e.g. :func:`check_samples` of the last step.
        filename: the reward file's name in messages.
        timeout_s: per-call and import limit of the check, seconds.
        success: the run's success rule; an edit that drops its function is
            refused (success would no longer be measured).

    Raises:
        EditRejected: the payload is malformed, the file fails the check
            (syntax, import, exception, non-finite or non-numeric reward,
            time-out, check process died), the weights do not fit it, or it
            drops the success function.
    """
    source, weights = payload.get("source"), payload.get("weights")
    if not isinstance(source, str) or not (weights is None or isinstance(weights, Mapping)):
        raise EditRejected("set_rewards needs {'source': <reward file text>, 'weights': {name: weight}}")
    try:
        result = validate(source, [e for e, _ in samples], [c for _, c in samples], timeout_s, filename=filename)
    except ValueError as err:  # samples that are not JSON
        raise EditRejected(f"could not check the edit: {err}") from None
    if not result.ok:
        raise EditRejected(result.message)
    try:
        (success or SuccessRule()).check(result.weights, f"the edited {filename}", edit=True)
    except SuccessError as err:
        raise EditRejected(str(err)) from None
    return RubricVersion(source, _weights(weights, result.weights) if weights else result.weights, filename)


def _weights(given: Mapping[str, Any], checked: dict[str, float]) -> dict[str, float]:
    """The payload's weights, in the file's order, once they fit its functions (as Rubric.with_weights)."""
    if set(given) != set(checked):
        raise EditRejected(f"weights name {sorted(given)} but the file's reward functions are {sorted(checked)}")
    for name, weight in given.items():
        if isinstance(weight, bool) or not isinstance(weight, numbers.Real) or not math.isfinite(weight):
            raise EditRejected(f"weight for {name!r} is {weight!r}; a weight must be a finite number")
    return {name: float(given[name]) for name in checked}
