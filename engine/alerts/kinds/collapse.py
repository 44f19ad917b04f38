"""``collapse``: the policy stopped exploring while failing.

Held-out pass@1 falls well below its best (and by more than twice the
standard error of a difference of two pass@1 on ``eval/num_examples``
examples, so a small eval's noise is not a fall), or for several steps most
groups' completions are identical (or the policy's entropy is near 0) while
the success rate (its mean over the last ``window`` steps) is well below its
best such mean: a learning rate that destroys the model.
"""

from __future__ import annotations

import math
from collections import Counter
from statistics import fmean

from pydantic import Field

from rlab.engine.alerts.base import Alert, AlertCheck, Recent, Shared, StepView


class Settings(Shared):
    """The fall from the best, and what counts as a deterministic policy for how long."""

    collapse_drop: float = Field(0.2, gt=0, le=1, description=(
        "Held-out pass@1 (or the step's success rate, while the policy is deterministic) this far below "
        "its best is a collapse."))
    collapse_share: float = Field(0.8, gt=0, le=1, description=(
        "Share of a step's groups whose completions are all identical, or of its completions that are one "
        "text, that counts as deterministic."))
    collapse_entropy: float = Field(0.05, ge=0, description="Mean token entropy (nats) this low also counts as deterministic.")
    collapse_steps: int = Field(5, ge=1, description="Consecutive deterministic, failing steps before collapse fires.")


class Collapse(AlertCheck[Settings]):
    """Held-out pass@1 well below its best, or a deterministic policy failing for ``collapse_steps``."""

    kind = "collapse"
    fires_when = ("held-out pass@1 falls `collapse_drop` below its best, and by more than twice the standard "
                  "error of two pass@1 on the eval's examples (8 examples: about 0.46), so an eval's sampling "
                  "noise is no collapse; or for `collapse_steps` steps `collapse_share` of groups sample one "
                  "identical completion, or that share of completions are one text, or the entropy is under "
                  "`collapse_entropy` nats, while the success rate is `collapse_drop` below its best")

    def begin(self) -> None:
        self._best_eval: tuple[float, int] | None = None
        self._eval_fall: Alert | None = None  # the last held-out eval's verdict, held until the next eval
        self._best_success = 0.0
        self._success: Recent[float] = self.recent()
        self._failing_deterministic = 0

    def check(self, view: StepView) -> Alert | None:
        held_out = view.finite("eval/pass_at_1")
        if held_out is not None:
            self._eval_fall = self._held_out_fall(view, held_out)
        return self._eval_fall or self._deterministic_and_failing(view)

    def _held_out_fall(self, view: StepView, held_out: float) -> Alert | None:
        """This eval's fall from the best eval so far, or None (then a new best is kept)."""
        size = view.finite("eval/num_examples")
        if self._best_eval is not None and held_out <= self._best_eval[0] - _fall(
                self.settings.collapse_drop, self._best_eval[0], held_out, size):
            best, at = self._best_eval
            return self.alert(view, f"held-out pass@1 fell from {best:.2f} (step {at}) to {held_out:.2f}",
                              value=held_out)
        if self._best_eval is None or held_out > self._best_eval[0]:
            self._best_eval = (held_out, view.step)
        return None

    def _deterministic_and_failing(self, view: StepView) -> Alert | None:
        th, groups = self.settings, view.groups
        success = view.finite("success_rate")
        identical = [g.group_id for g in groups if g.identical]
        texts = [text for g in groups for text in g.completions]
        mode, mode_count = Counter(texts).most_common(1)[0] if texts else ("", 0)
        entropy = view.finite("entropy")
        deterministic = (bool(groups) and (len(identical) >= th.collapse_share * len(groups)
                                           or mode_count >= th.collapse_share * len(texts))
                         or (entropy is not None and entropy <= th.collapse_entropy))
        # The success rate over the window's last steps, not one step's: a step of P groups is a
        # noisy sample (16 groups of a tool task swung 0.33-0.77 around 0.55), and a best taken
        # from one lucky step made a healthy run "fall" by 0.2.
        if success is not None:
            self._success.append(success)
            success = fmean(self._success)
        failing = success is not None and success <= self._best_success - th.collapse_drop
        self._failing_deterministic = self._failing_deterministic + 1 if deterministic and failing else 0
        if success is not None:
            self._best_success = max(self._best_success, success)
        if self._failing_deterministic < th.collapse_steps or success is None:
            return None
        return self.alert(view, f"for {self._failing_deterministic} steps the policy has been near deterministic "
                          f"({len(identical)}/{len(groups)} groups one identical completion, {mode_count}/{len(texts)} "
                          f"completions {mode[:40]!r}, entropy {_shown(entropy)}) while the success rate (mean of "
                          f"the last {len(self._success)} steps) fell to {success:.2f} from {self._best_success:.2f}",
                          identical[:5], success)


def _fall(drop: float, best: float, now: float, size: float | None) -> float:
    """How far held-out pass@1 must fall below ``best`` to count: ``drop``, and on ``size``
    examples at least twice the standard error of the difference of two independent pass@1,
    2 * sqrt(2 p (1 - p) / n) with p their mean (the two-proportion z-test, z = 2): on 64
    examples near p = 0.3 that is 0.16, under the default 0.2; on 8 it is 0.46."""
    if size is None or size < 1:
        return drop
    p = (best + now) / 2
    return max(drop, 2 * math.sqrt(2 * p * (1 - p) / size))


def _shown(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"
