"""``tool_abandon``: the policy stops calling its tools while the success rate falls (it
unlearned the tool, or found an answer the reward takes without it), or stays at 0
(calling never paid: a policy that cannot use its tools yet)."""

from __future__ import annotations

from statistics import fmean

from pydantic import Field

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
    fires_when = ("over `window` steps the tool-use rate falls `tool_drop` while the success rate falls "
                  "`tool_success_drop`, or, while no trajectory has succeeded, falls to half its early level "
                  "from 0.1 or more")

    def begin(self) -> None:
        self._trend = self.trend("tools/use_rate", "success_rate")

    def check(self, view: StepView) -> Alert | None:
        rises, steps = self._trend.rises(view), self._trend.steps
        if rises is None:
            return None
        use_fall, success_fall = -rises[0], -rises[1]
        early_use = fmean(use for use, _ in steps.halves()[0])
        # a policy that never succeeded cannot lose success: its use halving (from 0.1 up) is the whole sign
        never = all(success == 0 for _, success in steps)
        if not (never and early_use >= 0.1 and use_fall >= early_use / 2) and (
                use_fall < self.settings.tool_drop or success_fall < self.settings.tool_success_drop):
            return None
        why = ("no trajectory succeeded: calling never paid, so RL unlearns it; warm-start the policy on more "
               "transcripts that call the tools" if never else
               f"the success rate fell {success_fall:.2f}: it is answering without them")
        return self.alert(view, f"over {len(steps)} steps the policy stopped calling its tools (its use rate "
                          f"fell {use_fall:.2f}) while {why}", value=use_fall)
