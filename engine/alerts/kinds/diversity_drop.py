"""``diversity_drop``: distinct-n within the unsolved groups falls.

A group whose every trajectory solved the task (its declared success) is left
out: eight copies of the one right answer are a task learned, not a collapse
(the default arithmetic run raised it twice while its pass@1 rose to 0.84).
"""

from __future__ import annotations

from statistics import fmean

from pydantic import Field

from rlab.engine.alerts.base import Alert, AlertCheck, Baseline, Shared, StepView, top_groups
from rlab.engine.alerts.inputs import distinct_n


class Settings(Shared):
    """The n of distinct-n, and the fall that counts."""

    distinct_n: int = Field(2, ge=1, description="n of distinct-n (word n-grams) within a group.")
    diversity_drop: float = Field(0.5, gt=0, lt=1, description="Relative fall of mean distinct-n vs the early baseline.")


class DiversityDrop(AlertCheck[Settings]):
    """The unsolved groups' mean distinct-n falls ``diversity_drop`` (relative) below its early level."""

    kind = "diversity_drop"
    fires_when = ("distinct-n within the unsolved groups falls `diversity_drop` (relative) below its first "
                  "`window` steps; a group whose every trajectory solved the task is left out, since copies of "
                  "the one right answer are no collapse")

    def begin(self) -> None:
        self._early = Baseline()

    def check(self, view: StepView) -> Alert | None:
        th = self.settings
        per_group = {g.group_id: distinct_n(g.completions, th.distinct_n) for g in view.groups if not g.solved}
        if not per_group:
            return None
        mean = fmean(per_group.values())
        base = self._early.level(mean, th.window)
        if base is None or base <= 0 or (base - mean) / base < th.diversity_drop:
            return None
        ids = top_groups(per_group, highest=False)
        return self.alert(view, f"distinct-{th.distinct_n} within unsolved groups fell {base:.2f} -> {mean:.2f}",
                          ids, mean)
