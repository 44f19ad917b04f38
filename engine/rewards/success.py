"""What counts as solved: the task's declared success function, not the total reward.

A reward is what the policy is paid; success is what the task is for. They
part ways exactly when a policy games its reward: a rubric of "exact
answer" + 0.5 x "mentions the word" + "brevity" pays 1.5 for a short answer
that mentions the word and is wrong, so "total reward >= 1" would call it
solved. So every success figure of the lab (held-out pass@1, the
``success_rate`` step metric, eval and select summaries, compare, inspect
``--only-fails``, summary.json) comes from one :class:`SuccessRule`: the
unweighted value of one reward function (task.toml ``success = "NAME"``;
built-in scenarios declare theirs) against ``success_threshold`` (default
1.0). A task that declares none is judged by its total reward, with a
warning when its rubric has more than one function (then the total can be
paid for partial credit).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from rlab.engine.rewards.score_result import ScoreResult
from rlab.engine.types import Scenario
from rlab.store.errors import UsageError
from rlab.store.records import DEFAULT_SUCCESS_THRESHOLD


class Overrides(Protocol):
    """Options that may override a task's declaration (RunConfig, LoopSettings)."""

    success: str | None
    success_threshold: float | None


class SuccessError(UsageError):
    """A success function the rubric does not have; the message names both and the fix."""


@dataclass(frozen=True)
class SuccessRule:
    """One trajectory is solved when ``function``'s unweighted reward (the
    total reward when ``function`` is None) is >= ``threshold``.

    Attributes:
        function: a reward function of the task's rubric, or None.
        threshold: the value that counts as solved (float, same units as the reward).
    """

    function: str | None = None
    threshold: float = DEFAULT_SUCCESS_THRESHOLD

    @classmethod
    def of(cls, scenario: Scenario, config: Overrides | None = None) -> SuccessRule:
        """The rule a scenario declares (``success``, ``success_threshold``), each
        overridden by the run's ``--success`` / ``--success-threshold`` when set
        (``config``: a RunConfig or an eval/select's settings)."""
        function = config.success if config is not None and config.success is not None else scenario.success
        threshold = (config.success_threshold if config is not None and config.success_threshold is not None
                     else scenario.success_threshold)
        return cls(function, threshold)

    @property
    def label(self) -> str:
        """How the rule reads on screen: ``correct >= 1`` or ``total reward >= 1``."""
        return f"{self.function or 'total reward'} >= {self.threshold:g}"

    def check(self, weights: Mapping[str, float], where: str = "the reward file", *, edit: bool = False) -> None:
        """Make sure the rubric (its ``weights``) has the success function.

        ``edit``: the rubric is an edit of a running run's (the reward editor,
        ``rlab reward``), whose success function stays; the advice then is to
        keep it, not the ``--success`` flag that picks one when a run starts.

        Raises:
            SuccessError: ``function`` is not one of the rubric's functions.
        """
        if self.function is not None and self.function not in weights:
            other = (": the run counts pass@1 with it, and an edit cannot change that" if edit
                     else " or name another one with --success NAME")
            raise SuccessError(
                f"success = {self.function!r} is not a reward function of {where} "
                f"(its functions: {', '.join(weights) or 'none'}); keep {self.function} in WEIGHTS "
                f"(weight 0 logs it without paying for it){other}")

    def warning(self, weights: Mapping[str, float]) -> str | None:
        """The start-up warning of a rule that is only the total reward of several
        functions (partial credit and bonuses then count as solved), else None."""
        if self.function is not None or len(weights) < 2:
            return None
        return (f"this task declares no success function, so pass@1 = total reward >= {self.threshold:g} "
                f"of {len(weights)} functions ({', '.join(weights)}): a bonus or partial credit counts as "
                "solved; declare one in task.toml, e.g. success = \"" + next(iter(weights)) + "\"")

    def passed(self, score: ScoreResult) -> bool | None:
        """Whether ``score`` is solved; None when it has no verdict (an errored
        score, or a success function that returned no finite value)."""
        return None if score.error is not None else self.verdict(score.reward, score.components)

    def verdict(self, total: float, components: Mapping[str, float]) -> bool | None:
        """Whether a scored trajectory is solved: ``function``'s unweighted value
        in ``components`` (the verifier's ``total`` reward when ``function`` is
        None) against ``threshold``; None when that value is missing or not finite."""
        value = total if self.function is None else components.get(self.function)
        if value is None or not math.isfinite(value):
            return None
        return value >= self.threshold

    def rate(self, scores: Sequence[ScoreResult]) -> float:
        """Share of ``scores`` that are solved (pass@1 of greedy samples); nan
        when any has no verdict, since an errored score's 0 is not a failure."""
        verdicts = [self.passed(s) for s in scores]
        if not verdicts or any(v is None for v in verdicts):
            return float("nan")
        return sum(bool(v) for v in verdicts) / len(verdicts)
