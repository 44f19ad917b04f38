"""``tool_errors``: the share of failed tool calls rises above its early level."""

from __future__ import annotations

from statistics import fmean

from pydantic import BaseModel, Field

from rlab.engine.alerts.base import Alert, AlertCheck, Shared, StepView


class Settings(Shared):
    """The rise of the error share that counts."""

    tool_error_rise: float = Field(0.25, gt=0, le=1, description=(
        "Rise of tools/error_share above its early level (the mean of its first `window` steps)."))


class ToolErrors(AlertCheck[Settings]):
    """``tools/error_share`` rises ``tool_error_rise`` above its mean over the first ``window`` steps."""

    kind = "tool_errors"
    settings_model = Settings
    fires_when = "the share of failed tool calls rises `tool_error_rise` above its first `window` steps"

    def __init__(self, thresholds: BaseModel) -> None:
        super().__init__(thresholds)
        self._early: list[float] = []

    def check(self, view: StepView) -> Alert | None:
        share = view.finite("tools/error_share")
        if share is None:
            return None
        if len(self._early) < self.settings.window:
            self._early.append(share)
            return None
        base = fmean(self._early)
        if share - base < self.settings.tool_error_rise:
            return None
        failing = {g.group_id: sum(g.tool_errors) for g in view.groups if any(g.tool_errors)}
        ids = sorted(failing, key=failing.__getitem__, reverse=True)[:5]
        return self.alert(view, f"the share of failed tool calls rose {base:.0%} -> {share:.0%}: calls malformed, "
                          "to unknown tools, with bad arguments, or tools failing (open the groups to read the "
                          "errors)", ids, share)
