"""``tool_abandon``: the policy stops calling its tools while the success rate falls (it
unlearned the tool, or found an answer the reward takes without it), or stays at 0
(calling never paid: a policy that cannot use its tools yet)."""

from __future__ import annotations

from collections import deque
from statistics import fmean

from pydantic import BaseModel, Field

from rlab.engine.alerts.base import Alert, AlertCheck, Shared, StepView


class Settings(Shared):
    """The fall of tool use, and the fall of success that makes it abandonment."""

    tool_drop: float = Field(0.3, gt=0, le=1, description=(
        "Over the window, the fall of tools/use_rate at which tool_abandon fires, when success falls too."))
    tool_success_drop: float = Field(0.1, ge=0, le=1, description=(
        "Over the window, the fall of the success rate that makes a fall in tool use a tool_abandon."))


class ToolAbandon(AlertCheck[Settings]):
    """Over the window, ``tools/use_rate`` fell while the success rate fell too (or never rose from 0)."""

    kind = "tool_abandon"
    settings_model = Settings
    fires_when = ("over `window` steps the tool-use rate falls `tool_drop` while the success rate falls "
                  "`tool_success_drop`, or, while no trajectory has succeeded, falls to half its early level "
                  "from 0.1 or more")

    def __init__(self, thresholds: BaseModel) -> None:
        super().__init__(thresholds)
        self._trend: deque[tuple[float, float]] = deque(maxlen=self.settings.window)

    def retune(self, thresholds: BaseModel) -> None:
        super().retune(thresholds)
        self._trend = deque(self._trend, maxlen=self.settings.window)

    def check(self, view: StepView) -> Alert | None:
        use, success = view.finite("tools/use_rate"), view.finite("success_rate")
        if use is None or success is None:
            return None
        self._trend.append((use, success))
        if len(self._trend) < self.settings.window:
            return None
        half = len(self._trend) // 2
        early, late = list(self._trend)[:half], list(self._trend)[-half:]
        early_use = fmean(u for u, _ in early)
        use_fall = early_use - fmean(u for u, _ in late)
        success_fall = fmean(s for _, s in early) - fmean(s for _, s in late)
        # a policy that never succeeded cannot lose success: its use halving (from 0.1 up) is the whole sign
        never = all(s == 0 for _, s in self._trend)
        if not (never and early_use >= 0.1 and use_fall >= early_use / 2) and (
                use_fall < self.settings.tool_drop or success_fall < self.settings.tool_success_drop):
            return None
        why = ("no trajectory succeeded: calling never paid, so RL unlearns it; warm-start the policy on more "
               "transcripts that call the tools" if never else
               f"the success rate fell {success_fall:.2f}: it is answering without them")
        return self.alert(view, f"over {len(self._trend)} steps the policy stopped calling its tools (its use rate "
                          f"fell {use_fall:.2f}) while {why}", value=use_fall)
