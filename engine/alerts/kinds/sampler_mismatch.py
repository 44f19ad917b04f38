"""``sampler_mismatch``: the sampler is not the trained weights (a bf16 or merged copy,
vLLM) and its log-probs drifted from theirs.

The mean |log pi_old - log pi_sampler| of the trained tokens
(``sampling/sampling_logp_difference/mean``, logged by the truncated
importance-sampling correction) passes a threshold: the samples come from
another distribution than the one trained, the instability Yao et al. 2025
trace to it (a stale adapter on the server, a precision the model does not
survive).
"""

from __future__ import annotations

from pydantic import Field

from rlab.engine.alerts.base import Alert, AlertCheck, Shared, StepView


class Settings(Shared):
    """The mean log-prob difference that counts."""

    sampler_mismatch: float = Field(0.15, gt=0, description=(
        "Mean |log pi_old - log pi_sampler| (nats) of a step's trained tokens at which sampler_mismatch fires."))


class SamplerMismatch(AlertCheck[Settings]):
    """``sampling/sampling_logp_difference/mean`` reaches ``sampler_mismatch``."""

    kind = "sampler_mismatch"
    fires_when = ("the sampler's log-probs differ from the trained policy's by `sampler_mismatch` nats a "
                  "token on average")

    def check(self, view: StepView) -> Alert | None:
        mean = view.finite("sampling/sampling_logp_difference/mean")
        if mean is None or mean < self.settings.sampler_mismatch:
            return None
        lowest = view.finite("sampling/importance_sampling_ratio/min")
        low = f"; the lowest importance weight was {lowest:.3f}" if lowest is not None else ""
        return self.alert(view, f"the sampler's log-probs differ from the trained policy's by {mean:.3f} nats a "
                          f"token on average (threshold {self.settings.sampler_mismatch:g}){low}: the samples come "
                          "from another distribution than the one trained (a stale adapter on the server, or a "
                          "precision the model does not survive); the update's truncated importance weights "
                          "correct for part of it", value=mean)
