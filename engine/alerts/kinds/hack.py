"""``hack``: the total reward rises while the success rate (the task's declared success
function, ``engine.success``) stays flat or falls."""

from __future__ import annotations

from collections import deque
from statistics import fmean

from pydantic import BaseModel, Field

from rlab.engine.alerts.base import Alert, AlertCheck, Shared, StepView


class Settings(Shared):
    """How far the reward's rise may outrun the success rate's."""

    hack_gap: float = Field(0.15, gt=0, description=(
        "Over the window, the rise of mean reward (divided by the rubric's total weight) minus the rise "
        "of the success rate at which hack fires."))


class Hack(AlertCheck[Settings]):
    """Over the window, the reward (per unit of rubric weight) rose ``hack_gap`` more than success."""

    kind = "hack"
    settings_model = Settings
    reward_hole = True
    fires_when = ("over `window` steps the mean reward's rise (per unit of the rubric's total weight) exceeds "
                  "the success rate's rise by `hack_gap`")

    def __init__(self, thresholds: BaseModel) -> None:
        super().__init__(thresholds)
        self._trend: deque[tuple[float, float]] = deque(maxlen=self.settings.window)

    def retune(self, thresholds: BaseModel) -> None:
        super().retune(thresholds)
        self._trend = deque(self._trend, maxlen=self.settings.window)

    def check(self, view: StepView) -> Alert | None:
        reward, success = view.finite("reward"), view.finite("success_rate")
        if reward is None or success is None:
            return None
        self._trend.append((reward, success))
        if len(self._trend) < self.settings.window:
            return None
        half = len(self._trend) // 2
        early, late = list(self._trend)[:half], list(self._trend)[-half:]
        reward_rise = fmean(r for r, _ in late) - fmean(r for r, _ in early)
        success_rise = fmean(s for _, s in late) - fmean(s for _, s in early)
        gap = reward_rise / view.reward_scale - success_rise
        if reward_rise <= 0 or gap < self.settings.hack_gap:
            return None
        return self.alert(view, f"mean reward rose {reward_rise:+.2f} over {len(self._trend)} steps while the "
                          f"success rate moved {success_rise:+.2f}: the policy is paid for something that does "
                          "not solve the task", value=gap)
