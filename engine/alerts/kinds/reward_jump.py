"""``reward_jump``: mean reward jumps after a plateau."""

from __future__ import annotations

from statistics import fmean

from pydantic import Field

from rlab.engine.alerts.base import Alert, AlertCheck, Recent, Shared, StepView


class Settings(Shared):
    """The plateau and the rise that counts as a jump."""

    plateau_range: float = Field(0.05, ge=0, description="Max - min of mean reward over the window for a plateau.")
    jump: float = Field(0.2, gt=0, description="Rise of mean reward above the plateau mean that counts as a jump.")


class RewardJump(AlertCheck[Settings]):
    """Mean reward rises ``jump`` above the mean of a window whose rewards lie within ``plateau_range``."""

    kind = "reward_jump"
    fires_when = "mean reward rises `jump` above a flat window"

    def begin(self) -> None:
        self._rewards: Recent[float] = self.recent()

    def check(self, view: StepView) -> Alert | None:
        reward, window, th = view.metrics.get("reward"), self._rewards, self.settings
        if reward is None:
            return None
        alert = None
        if window.full and max(window) - min(window) <= th.plateau_range:
            base = fmean(window)
            if reward - base >= th.jump:
                alert = self.alert(view, f"mean reward jumped {base:.2f} -> {reward:.2f} after a "
                                   f"{len(window)}-step plateau", value=reward - base)
        window.append(reward)
        return alert
