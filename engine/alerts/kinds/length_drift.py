"""``length_drift``: mean completion length drifts away from its early level."""

from __future__ import annotations

from statistics import fmean

from pydantic import BaseModel, Field

from rlab.engine.alerts.base import Alert, AlertCheck, Shared, StepView


class Settings(Shared):
    """How far the length may move from its early level."""

    length_drift: float = Field(0.5, gt=0, description="Relative change of completions/mean_length vs the early baseline.")


class LengthDrift(AlertCheck[Settings]):
    """``completions/mean_length`` moves ``length_drift`` (relative) from its mean over the first ``window`` steps."""

    kind = "length_drift"
    settings_model = Settings
    fires_when = "mean completion length moves `length_drift` (relative: 0.5 is 50 %) from its first `window` steps"

    def __init__(self, thresholds: BaseModel) -> None:
        super().__init__(thresholds)
        self._early: list[float] = []

    def check(self, view: StepView) -> Alert | None:
        length, th = view.metrics.get("completions/mean_length"), self.settings
        if length is None:
            return None
        if len(self._early) < th.window:
            self._early.append(length)
            return None
        base = fmean(self._early)
        change = (length - base) / base if base > 0 else 0.0
        if abs(change) < th.length_drift:
            return None
        # Open the groups that drifted most: longest completions for a rise, shortest for a fall.
        mean_chars = {g.group_id: fmean(map(len, g.completions)) for g in view.groups if g.completions}
        ids = sorted(mean_chars, key=mean_chars.__getitem__, reverse=change > 0)[:5]
        return self.alert(view, f"completion length {base:.1f} -> {length:.1f} tokens ({change:+.0%})", ids, change)
