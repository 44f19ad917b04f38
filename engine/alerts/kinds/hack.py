"""``hack``: the total reward rises while the success rate (the task's declared success
function, ``engine.rewards.success``) stays flat or falls."""

from __future__ import annotations

from pydantic import Field

from rlab.engine.alerts.base import Alert, AlertCheck, Shared, StepView


class Settings(Shared):
    """How far the reward's rise may outrun the success rate's."""

    hack_gap: float = Field(0.15, gt=0, description=(
        "Over the window, the rise of mean reward (divided by the rubric's total weight) minus the rise "
        "of the success rate at which hack fires."))


class Hack(AlertCheck[Settings]):
    """Over the window, the reward (per unit of rubric weight) rose ``hack_gap`` more than success."""

    kind = "hack"
    reward_hole = True
    fires_when = ("over `window` steps the mean reward's rise (per unit of the rubric's total weight) exceeds "
                  "the success rate's rise by `hack_gap`")

    def begin(self) -> None:
        self._trend = self.trend("reward", "success_rate")

    def check(self, view: StepView) -> Alert | None:
        rises = self._trend.rises(view)
        if rises is None:
            return None
        reward_rise, success_rise = rises
        gap = reward_rise / view.reward_scale - success_rise
        if reward_rise <= 0 or gap < self.settings.hack_gap:
            return None
        return self.alert(view, f"mean reward rose {reward_rise:+.2f} over {len(self._trend.steps)} steps while the "
                          f"success rate moved {success_rise:+.2f}: the policy is paid for something that does "
                          "not solve the task", value=gap)
