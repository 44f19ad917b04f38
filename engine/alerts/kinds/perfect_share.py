"""``perfect_share``: a suspicious share of perfect scores in one step."""

from __future__ import annotations

from pydantic import Field

from rlab.engine.alerts.base import Alert, AlertCheck, Shared, StepView
from rlab.engine.alerts.inputs import GroupStats


class Settings(Shared):
    """What a perfect score is, and the share of them that is suspicious."""

    perfect_reward: float = Field(1.0, description="A trajectory reward >= this is a perfect score.")
    perfect_share: float = Field(0.9, gt=0, le=1, description="Share of perfect scores in a step that is suspicious.")


class PerfectShare(AlertCheck[Settings]):
    """``perfect_share`` of a step's rewards are at least ``perfect_reward``; the message says
    whether those trajectories solved the task."""

    kind = "perfect_share"
    fires_when = ("`perfect_share` of a step's rewards are at least `perfect_reward`; the message says whether "
                  "those trajectories solved the task (a task nearly learned, as the default run at about step "
                  "240) or not (the rubric pays for something else)")

    def check(self, view: StepView) -> Alert | None:
        th = self.settings
        rewards = [r for g in view.groups for r in g.rewards]
        if not rewards:
            return None
        share = sum(r >= th.perfect_reward for r in rewards) / len(rewards)
        if share < th.perfect_share:
            return None
        ids = [g.group_id for g in view.groups if all(r >= th.perfect_reward for r in g.rewards)]
        message = f"{share:.0%} of rewards are perfect (>= {th.perfect_reward:g})"
        return self.alert(view, message + _verdict(view.groups, th.perfect_reward), ids, share)


def _verdict(groups: list[GroupStats], perfect: float) -> str:
    """What the success verdicts say of the perfect rewards: a task nearly learned
    (they solved it: little reward spread is left) or a rubric paying for
    something else; "" where the trajectories carry no verdicts."""
    verdicts = [ok for g in groups for r, ok in zip(g.rewards, g.successes) if r >= perfect and ok is not None]
    if not verdicts:
        return ""
    solved = sum(verdicts) / len(verdicts)
    if solved >= 0.9:
        return f", and {solved:.0%} of those solved the task: few groups keep a reward spread to learn from"
    return f", but only {solved:.0%} of those solved the task: the rubric pays for something else"
