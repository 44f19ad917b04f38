"""ScoreResult: a rubric's verdict on one trajectory, built from its functions' answers.

A reward function answers a number, or ``{"reward": float, "details":
dict}`` with optional ``"step_rewards"`` (a list with one reward per turn,
or a dict ``{turn_index: reward}``). :func:`outcome_of` checks one answer;
:func:`combine` merges every function's outcome on a trajectory into the
weighted total. A trajectory with any error gets a total of 0.0, not a
partial sum.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlab.engine.rewards.rubric_errors import line_of, where

#: The largest reward magnitude a function (or a weighted total) may give. A
#: finite reward of 1e308 passes isfinite(), then its group's mean and std
#: overflow to inf and the update turns the weights into NaN; 1e6 is far
#: above any real reward scale and far below float64's overflow.
MAX_ABS_REWARD = 1e6

#: Per-turn rewards of one function or one trajectory: one float per turn, or
#: ``{turn_index: reward}`` for the turns that earn one.
StepRewards = list[float] | dict[int, float]


@dataclass
class ScoreResult:
    """The rubric's verdict on one trajectory.

    Attributes:
        reward: weighted total ``sum_f WEIGHTS[f] * components[f]`` (float);
            0.0 when any function errored.
        components: unweighted reward of each rubric function, by name
            (0.0 for a function that errored).
        details: each function's details dict under its name, plus a
            top-level ``parse_status`` taken from the first function (in
            WEIGHTS order) that reports one, and ``error`` when there is one.
        step_rewards: per-turn rewards, the weighted sum over the functions
            that return ``step_rewards`` (None when none does): a list (one
            per turn) when every such function returned a list, else a dict
            ``{turn_index: reward}`` (turns not named earn 0). The engine
            puts the rest of ``reward`` on the last turn
            (``engine.rewards.turns``).
        error: ``"fn_name: ExcType: message (rewards.py line N)"`` for the
            first function that failed, else None. On an error ``details``
            also holds ``error``, ``error_kind`` (``"exception"``,
            ``"bad_reward"`` or ``"timeout"``) and ``error_line`` (int or None).
    """

    reward: float
    components: dict[str, float]
    details: dict[str, Any]
    step_rewards: StepRewards | None = None
    error: str | None = None


@dataclass
class Outcome:
    """One function's checked answer on one trajectory.

    Attributes:
        reward: the function's reward (0.0 on an error).
        details: its details dict.
        step_rewards: its per-turn rewards, or None.
        error: the message for :attr:`ScoreResult.error`, or None.
        kind: ``"exception"``, ``"bad_reward"`` or ``"timeout"`` on an error.
        line: the reward-file line of the error, or None.
    """

    reward: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)
    step_rewards: StepRewards | None = None
    error: str | None = None
    kind: str | None = None
    line: int | None = None


def outcome_of(name: str, status: str, value: Any, fn: Callable[..., Any], filename: str) -> Outcome:
    """Check one call's raw answer (or the exception it raised).

    Args:
        name: the function's name in WEIGHTS.
        status: ``"ok"`` (``value`` is the answer) or ``"raised"``
            (``value`` is the exception).
        value: the answer or the exception.
        fn: the function (its def line is reported for a malformed answer).
        filename: the name the reward file was compiled under.
    """
    if status == "raised":
        line = line_of(value.__traceback__, filename)
        return Outcome(error=f"{name}: {type(value).__name__}: {value}{where(filename, line)}",
                       kind="exception", line=line)
    details: Any = {}
    steps: Any = None
    reward = value
    if type(value) is dict or isinstance(value, Mapping):
        if "reward" not in value:
            return _bad(name, f"returned a dict without 'reward' (keys {sorted(map(str, value))})", fn, filename)
        reward, details, steps = value["reward"], value.get("details") or {}, value.get("step_rewards")
        if not isinstance(details, Mapping):
            return _bad(name, f"'details' must be a dict, got {type(details).__name__}", fn, filename)
    why = _bad_number(reward)
    if why:
        return _bad(name, f"returned reward {reward!r:.80} ({why})", fn, filename)
    if steps is not None:
        steps, problem = _step_rewards(steps)
        if problem:
            return _bad(name, problem, fn, filename)
    return Outcome(reward=float(reward), details=dict(details), step_rewards=steps)


def _bad(name: str, problem: str, fn: Callable[..., Any], filename: str) -> Outcome:
    """An Outcome for a malformed answer, pointing at the function's def line."""
    line = getattr(getattr(inspect.unwrap(fn), "__code__", None), "co_firstlineno", None)
    return Outcome(
        error=f"{name}: {problem}; expected a finite float or "
        f"{{'reward': float, 'details': dict}}{where(filename, line)}",
        kind="bad_reward",
        line=line,
    )


def combine(outcomes: Mapping[str, Sequence[Outcome]], weights: Mapping[str, float], i: int) -> ScoreResult:
    """Merge every function's outcome on trajectory ``i`` into a ScoreResult.

    Args:
        outcomes: function name -> one Outcome per trajectory, in WEIGHTS order.
        weights: function name -> weight.
        i: the trajectory's index.
    """
    components: dict[str, float] = {}
    details: dict[str, Any] = {}
    parse_status = None
    failed: Outcome | None = None
    with_steps = []
    for m, per_trajectory in outcomes.items():
        o = per_trajectory[i]
        components[m] = o.reward
        details[m] = o.details
        if o.error:
            details[m] = {**o.details, "error": o.error}
            failed = failed or o
        if parse_status is None:
            parse_status = o.details.get("parse_status")
        if o.step_rewards is not None:
            with_steps.append((m, o.step_rewards))
    if parse_status is not None:
        details["parse_status"] = parse_status
    lists = [(m, s) for m, s in with_steps if isinstance(s, list)]
    if lists and failed is None and len({len(s) for _, s in lists}) > 1:
        failed = Outcome(
            error="step_rewards: functions disagree on the number of turns: "
            + ", ".join(f"{m} has {len(s)}" for m, s in lists),
            kind="bad_reward",
        )
    if failed is not None:
        details.update(error=failed.error, error_kind=failed.kind, error_line=failed.line)
        return ScoreResult(reward=0.0, components=components, details=details, error=failed.error)
    total = 0.0
    for m, r in components.items():
        total += weights[m] * r
    if not abs(total) <= MAX_ABS_REWARD:  # every part in range, the weighted sum is not (or nan)
        error = (f"the weighted total {total:g} of {', '.join(components)} is beyond +-{MAX_ABS_REWARD:g}: "
                 "rewards that large overflow the group statistics and the update; lower a weight or a reward")
        details.update(error=error, error_kind="bad_reward", error_line=None)
        return ScoreResult(reward=0.0, components=components, details=details, error=error)
    steps = _weighted_steps([(weights[m], s) for m, s in with_steps]) if with_steps else None
    return ScoreResult(reward=total, components=components, details=details, step_rewards=steps)


def _step_rewards(steps: Any) -> tuple[StepRewards, str | None]:
    """A function's ``step_rewards`` as floats, or the problem with it.

    A list gives one reward per turn; a dict maps turn indices (ints >= 0)
    to rewards.
    """
    if isinstance(steps, Mapping):
        out: dict[int, float] = {}
        for t, r in steps.items():
            if isinstance(t, bool) or not isinstance(t, int) or t < 0:
                return {}, f"step_rewards key {t!r:.40} is not a turn index (an int >= 0)"
            why = _bad_number(r)
            if why:
                return {}, f"step_rewards[{t}] is {r!r:.40} ({why})"
            out[t] = float(r)
        return out, None
    if isinstance(steps, (str, bytes)) or not isinstance(steps, Sequence):
        return [], (f"'step_rewards' must be a list of floats or a dict {{turn_index: float}}, "
                    f"got {type(steps).__name__}")
    for t, r in enumerate(steps):
        why = _bad_number(r)
        if why:
            return [], f"step_rewards[{t}] is {r!r:.40} ({why})"
    return [float(r) for r in steps], None


def _weighted_steps(weighted: list[tuple[float, StepRewards]]) -> StepRewards:
    """sum_f w_f * steps_f per turn: a list when every part is a list (of one
    length), else a dict by turn index."""
    if all(isinstance(s, list) for _, s in weighted):
        n = len(weighted[0][1])
        return [sum(w * s[t] for w, s in weighted) for t in range(n)]
    total: dict[int, float] = {}
    for w, steps in weighted:
        pairs = enumerate(steps) if isinstance(steps, list) else steps.items()
        for t, r in pairs:
            total[t] = total.get(t, 0.0) + w * r
    return total


def _bad_number(value: Any) -> str | None:
    """Why ``value`` is not a usable reward, or None when it is one."""
    if type(value) is not float and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
        return f"a {type(value).__name__}, not a number"
    if not math.isfinite(value):
        return "not finite"
    if abs(float(value)) > MAX_ABS_REWARD:
        return f"beyond +-{MAX_ABS_REWARD:g}: rewards that large overflow the group statistics and the update"
    return None
