"""``length_drift``: mean completion length drifts away from its early level."""

from __future__ import annotations

from statistics import fmean

from pydantic import Field

from rlab.engine.alerts.base import Alert, AlertCheck, Baseline, Shared, StepView, top_groups


class Settings(Shared):
    """How far the length may move from its early level."""

    length_drift: float = Field(0.5, gt=0, description="Relative change of completions/mean_length vs the early baseline.")


class LengthDrift(AlertCheck[Settings]):
    """``completions/mean_length`` moves ``length_drift`` (relative) from its mean over the first ``window`` steps."""

    kind = "length_drift"
    fires_when = "mean completion length moves `length_drift` (relative: 0.5 is 50 %) from its first `window` steps"

    def begin(self) -> None:
        self._early = Baseline()

    def check(self, view: StepView) -> Alert | None:
        th = self.settings
        seen = self._early.against(view, "completions/mean_length", th.window)
        if seen is None:
            return None
        length, base = seen
        change = (length - base) / base if base > 0 else 0.0
        if abs(change) < th.length_drift:
            return None
        # Open the groups that drifted most: longest completions for a rise, shortest for a fall.
        mean_chars = {g.group_id: fmean(map(len, g.completions)) for g in view.groups if g.completions}
        ids = top_groups(mean_chars, highest=change > 0)
        return self.alert(view, f"completion length {base:.1f} -> {length:.1f} tokens ({change:+.0%})", ids, change)
