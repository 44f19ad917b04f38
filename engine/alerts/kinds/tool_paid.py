"""``tool_paid``: at the same success verdict, the reward rises with the number of calls:
the rubric pays for calling, not for what the call achieved (a reward per call),
whether or not the policy has found the loop yet."""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import fmean

from pydantic import Field

from rlab.engine.alerts.base import Alert, AlertCheck, Recent, Shared, StepView, top_groups


class Settings(Shared):
    """The reward per call that counts, and how much the calls must vary first."""

    tool_paid: float = Field(0.1, gt=0, description=(
        "Reward per extra tool call at the same success verdict, as a share of the rubric's total weight, "
        "at which tool_paid fires (when also more than twice its standard error)."))
    tool_paid_spread: float = Field(4.0, gt=0, description=(
        "How much the calls must vary within a verdict before tool_paid judges: the sum of squared "
        "deviations from each verdict's mean count (16 trajectories, half one call above the rest: 4)."))


@dataclass(frozen=True)
class _Paid:
    """One tool trajectory as ``tool_paid`` pools it: its group, calls, reward and success verdict."""

    group_id: int
    calls: int
    reward: float
    success: bool


class ToolPaid(AlertCheck[Settings]):
    """Over the window, the reward per extra call at the same success verdict (a pooled
    within-verdict least-squares slope) is ``tool_paid`` of the rubric's scale, and more
    than twice its standard error."""

    kind = "tool_paid"
    fires_when = ("at the same success verdict each tool call adds `tool_paid` of the rubric's total reward, "
                  "more than twice its standard error, over `window` steps whose calls vary at least "
                  "`tool_paid_spread` (a reward per call, named before the policy finds the loop)")

    def begin(self) -> None:
        self._paid: Recent[list[_Paid]] = self.recent()

    def check(self, view: StepView) -> Alert | None:
        th = self.settings
        self._paid.append([_Paid(g.group_id, c, r, ok) for g in view.groups
                           if len(g.tool_calls) == len(g.rewards) == len(g.successes)
                           for c, r, ok in zip(g.tool_calls, g.rewards, g.successes) if ok is not None])
        fit = _per_call([p for seen in self._paid for p in seen])
        if fit is None or fit.spread < th.tool_paid_spread:
            return None
        slope, error, scale = fit.slope, fit.error, view.reward_scale
        if slope / scale < th.tool_paid or slope <= 2 * error:
            return None
        return self.alert(view, f"at the same success verdict each tool call adds {slope:+.2f} reward "
                          f"({slope / scale:.0%} of the rubric's total, +/- {error:.2f}) over {fit.count} "
                          f"trajectories of {sum(map(bool, self._paid))} steps: the rubric pays for calling, not "
                          "for what the call achieved, so a policy that finds it will call until the turn limit "
                          "(fix the rubric and fork; a rubric meant to pay for lookups: raise alert.tool_paid)",
                          self._paid_failures(), slope / scale)

    def _paid_failures(self) -> list[int]:
        """The groups of the last step where a failing trajectory earned most: the hole, paid."""
        failed: dict[int, float] = {}
        for p in self._paid[-1]:
            if not p.success:
                failed[p.group_id] = max(failed.get(p.group_id, p.reward), p.reward)
        return top_groups(failed)


@dataclass(frozen=True)
class _Slope:
    """A least-squares slope of reward on calls, its standard error, the sum of squared
    deviations of the calls (``spread``) and the number of points."""

    slope: float
    error: float
    spread: float
    count: int


def _per_call(points: list[_Paid]) -> _Slope | None:
    """Reward on calls, fitted with one intercept per success verdict (a pooled within-group
    regression, the fixed-effects estimator: Wooldridge, "Introductory Econometrics", 14.1), so a
    call that leads to success is not counted as paid. Its standard error is
    sqrt(s^2 / spread), s^2 the residual variance on n - 1 - (verdicts) degrees of freedom.
    None when fewer than 4 points or the calls do not vary within a verdict."""
    centred: list[tuple[float, float]] = []
    verdicts = 0
    for verdict in (True, False):
        same = [p for p in points if p.success is verdict]
        if len(same) < 2:
            continue
        verdicts += 1
        calls, reward = fmean(p.calls for p in same), fmean(p.reward for p in same)
        centred += [(p.calls - calls, p.reward - reward) for p in same]
    spread = sum(c * c for c, _ in centred)
    if len(centred) < 4 or spread == 0:
        return None
    slope = sum(c * r for c, r in centred) / spread
    residual = sum((r - slope * c) ** 2 for c, r in centred) / (len(centred) - 1 - verdicts)
    return _Slope(slope, math.sqrt(residual / spread), spread, len(centred))
