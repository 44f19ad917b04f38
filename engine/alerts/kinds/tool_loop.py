"""``tool_loop``: many episodes call tools until the turn limit and never answer
(a tool task's steps, ``store.stepstats.tool_stats``)."""

from __future__ import annotations

from pydantic import Field

from rlab.engine.alerts.base import Alert, AlertCheck, Shared, StepView, top_groups


class Settings(Shared):
    """The share of looping episodes that is a loop."""

    tool_loop_share: float = Field(0.5, gt=0, le=1, description=(
        "Share of a step's tool episodes cut at the turn limit while still calling that is a loop."))


class ToolLoop(AlertCheck[Settings]):
    """``tools/loop_share`` reaches ``tool_loop_share``."""

    kind = "tool_loop"
    reward_hole = True
    fires_when = "`tool_loop_share` of a step's tool episodes are cut at the turn limit while still calling"

    def check(self, view: StepView) -> Alert | None:
        share = view.finite("tools/loop_share")
        if share is None or share < self.settings.tool_loop_share:
            return None
        ids = top_groups({g.group_id: sum(g.looped) for g in view.groups if any(g.looped)})
        return self.alert(view, f"{share:.0%} of episodes called tools until the turn limit without answering: a "
                          "loop of calls (a reward that pays per call, or a tool whose answer never settles the "
                          "question)", ids, share)
