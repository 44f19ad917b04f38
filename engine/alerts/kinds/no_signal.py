"""``no_signal``: almost every group has no reward spread for many steps, so GRPO-family
advantages are 0 and nothing is being trained."""

from __future__ import annotations

from pydantic import Field

from rlab.engine.alerts.base import Alert, AlertCheck, Shared, StepView


class Settings(Shared):
    """The share of groups without spread, and for how many steps."""

    no_signal_share: float = Field(0.9, gt=0, le=1, description="frac_reward_zero_std at or above this is a step without signal.")
    no_signal_steps: int = Field(10, ge=1, description="Consecutive steps without signal before no_signal fires.")


class NoSignal(AlertCheck[Settings]):
    """``frac_reward_zero_std`` at or above ``no_signal_share`` for ``no_signal_steps`` steps in a row."""

    kind = "no_signal"
    fires_when = ("`no_signal_share` of groups have no reward spread for `no_signal_steps` steps: nothing is "
                  "being trained")

    def begin(self) -> None:
        self._steps = 0

    def check(self, view: StepView) -> Alert | None:
        th = self.settings
        share = view.finite("frac_reward_zero_std")
        self._steps = self._steps + 1 if share is not None and share >= th.no_signal_share else 0
        if self._steps < th.no_signal_steps:
            return None
        return self.alert(view, f"{share:.0%} of groups had no reward spread for {self._steps} steps: their "
                          "advantages are 0, so nothing is being trained (solved, collapsed, or a reward that "
                          "cannot tell completions apart)", value=share)
