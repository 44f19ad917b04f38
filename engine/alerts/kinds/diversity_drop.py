"""``diversity_drop``: distinct-n within the unsolved groups falls.

A group whose every trajectory solved the task (its declared success) is left
out: eight copies of the one right answer are a task learned, not a collapse
(the default arithmetic run raised it twice while its pass@1 rose to 0.84).
"""

from __future__ import annotations

from statistics import fmean

from pydantic import BaseModel, Field

from rlab.engine.alerts.base import Alert, AlertCheck, Shared, StepView
from rlab.engine.alerts.inputs import distinct_n


class Settings(Shared):
    """The n of distinct-n, and the fall that counts."""

    distinct_n: int = Field(2, ge=1, description="n of distinct-n (word n-grams) within a group.")
    diversity_drop: float = Field(0.5, gt=0, lt=1, description="Relative fall of mean distinct-n vs the early baseline.")


class DiversityDrop(AlertCheck[Settings]):
    """The unsolved groups' mean distinct-n falls ``diversity_drop`` (relative) below its early level."""

    kind = "diversity_drop"
    settings_model = Settings
    fires_when = ("distinct-n within the unsolved groups falls `diversity_drop` (relative) below its first "
                  "`window` steps; a group whose every trajectory solved the task is left out, since copies of "
                  "the one right answer are no collapse")

    def __init__(self, thresholds: BaseModel) -> None:
        super().__init__(thresholds)
        self._early: list[float] = []

    def check(self, view: StepView) -> Alert | None:
        th = self.settings
        per_group = {g.group_id: distinct_n(g.completions, th.distinct_n) for g in view.groups if not g.solved}
        if not per_group:
            return None
        mean = fmean(per_group.values())
        if len(self._early) < th.window:
            self._early.append(mean)
            return None
        base = fmean(self._early)
        if base <= 0 or (base - mean) / base < th.diversity_drop:
            return None
        ids = sorted(per_group, key=per_group.__getitem__)[:5]
        return self.alert(view, f"distinct-{th.distinct_n} within unsolved groups fell {base:.2f} -> {mean:.2f}",
                          ids, mean)
