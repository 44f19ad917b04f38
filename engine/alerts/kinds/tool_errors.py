"""``tool_errors``: the share of failed tool calls rises above its early level."""

from __future__ import annotations

from pydantic import Field

from rlab.engine.alerts.base import Alert, AlertCheck, Baseline, Shared, StepView, top_groups


class Settings(Shared):
    """The rise of the error share that counts."""

    tool_error_rise: float = Field(0.25, gt=0, le=1, description=(
        "Rise of tools/error_share above its early level (the mean of its first `window` steps)."))


class ToolErrors(AlertCheck[Settings]):
    """``tools/error_share`` rises ``tool_error_rise`` above its mean over the first ``window`` steps."""

    kind = "tool_errors"
    fires_when = "the share of failed tool calls rises `tool_error_rise` above its first `window` steps"

    def begin(self) -> None:
        self._early = Baseline()

    def check(self, view: StepView) -> Alert | None:
        seen = self._early.against(view, "tools/error_share", self.settings.window)
        if seen is None:
            return None
        share, base = seen
        if share - base < self.settings.tool_error_rise:
            return None
        ids = top_groups({g.group_id: sum(g.tool_errors) for g in view.groups if any(g.tool_errors)})
        return self.alert(view, f"the share of failed tool calls rose {base:.0%} -> {share:.0%}: calls malformed, "
                          "to unknown tools, with bad arguments, or tools failing (open the groups to read the "
                          "errors)", ids, share)
