"""The watch's thresholds, and which alerts pause the run (``rlab run --alert NAME=VALUE``).

What each alert kind means is ``engine.alerts``' docstring.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: Every alert kind, in the order the watch checks them.
ALERT_KINDS = ("reward_jump", "perfect_share", "length_drift", "diversity_drop", "judge_disagreement",
               "collapse", "no_signal", "hack", "tool_loop", "tool_errors", "tool_abandon", "tool_paid",
               "sampler_mismatch")


class AlertThresholds(BaseModel):
    """Configurable thresholds of the run's watch, and which alerts pause the run.

    Build it from a dict (e.g. a run config's ``"alerts"`` entry, set with
    ``rlab run --alert NAME=VALUE``) with ``AlertThresholds.model_validate(d)``;
    unknown keys raise a ``pydantic.ValidationError`` naming the key, so typos
    are caught. ``pause_on`` is a list of alert kinds (or one comma-separated
    string: ``--alert pause_on=collapse,hack``; empty: never pause).
    """

    model_config = ConfigDict(extra="forbid")

    window: int = Field(10, ge=2, description="Steps in the plateau window and the early baseline.")
    plateau_range: float = Field(0.05, ge=0, description="Max - min of mean reward over the window for a plateau.")
    jump: float = Field(0.2, gt=0, description="Rise of mean reward above the plateau mean that counts as a jump.")
    perfect_reward: float = Field(1.0, description="A trajectory reward >= this is a perfect score.")
    perfect_share: float = Field(0.9, gt=0, le=1, description="Share of perfect scores in a step that is suspicious.")
    length_drift: float = Field(0.5, gt=0, description="Relative change of completions/mean_length vs the early baseline.")
    distinct_n: int = Field(2, ge=1, description="n of distinct-n (word n-grams) within a group.")
    diversity_drop: float = Field(0.5, gt=0, lt=1, description="Relative fall of mean distinct-n vs the early baseline.")
    min_rank_corr: float = Field(0.0, ge=-1, le=1, description=(
        "Kendall tau-b(judge, verifier) of a group below this is disagreement (the statistic of judge/tau)."))
    disagreement_share: float = Field(0.5, gt=0, le=1, description="Share of judged groups of a step that must disagree.")
    collapse_drop: float = Field(0.2, gt=0, le=1, description=(
        "Held-out pass@1 (or the step's success rate, while the policy is deterministic) this far below "
        "its best is a collapse."))
    collapse_share: float = Field(0.8, gt=0, le=1, description=(
        "Share of a step's groups whose completions are all identical, or of its completions that are one "
        "text, that counts as deterministic."))
    collapse_entropy: float = Field(0.05, ge=0, description="Mean token entropy (nats) this low also counts as deterministic.")
    collapse_steps: int = Field(5, ge=1, description="Consecutive deterministic, failing steps before collapse fires.")
    no_signal_share: float = Field(0.9, gt=0, le=1, description="frac_reward_zero_std at or above this is a step without signal.")
    no_signal_steps: int = Field(10, ge=1, description="Consecutive steps without signal before no_signal fires.")
    hack_gap: float = Field(0.15, gt=0, description=(
        "Over the window, the rise of mean reward (divided by the rubric's total weight) minus the rise "
        "of the success rate at which hack fires."))
    tool_loop_share: float = Field(0.5, gt=0, le=1, description=(
        "Share of a step's tool episodes cut at the turn limit while still calling that is a loop."))
    tool_error_rise: float = Field(0.25, gt=0, le=1, description=(
        "Rise of tools/error_share above its early level (the mean of its first `window` steps)."))
    tool_drop: float = Field(0.3, gt=0, le=1, description=(
        "Over the window, the fall of tools/use_rate at which tool_abandon fires, when success falls too."))
    tool_success_drop: float = Field(0.1, ge=0, le=1, description=(
        "Over the window, the fall of the success rate that makes a fall in tool use a tool_abandon."))
    tool_paid: float = Field(0.1, gt=0, description=(
        "Reward per extra tool call at the same success verdict, as a share of the rubric's total weight, "
        "at which tool_paid fires (when also more than twice its standard error)."))
    tool_paid_spread: float = Field(4.0, gt=0, description=(
        "How much the calls must vary within a verdict before tool_paid judges: the sum of squared "
        "deviations from each verdict's mean count (16 trajectories, half one call above the rest: 4)."))
    sampler_mismatch: float = Field(0.15, gt=0, description=(
        "Mean |log pi_old - log pi_sampler| (nats) of a step's trained tokens at which sampler_mismatch fires."))
    pause_on: list[str] = Field(["collapse"], description="Alert kinds that pause the run (the others only warn).")

    @field_validator("pause_on", mode="before")
    @classmethod
    def _kinds(cls, value: Any) -> Any:
        """A comma-separated string is a list; every name must be an alert kind."""
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        unknown = sorted(set(value) - set(ALERT_KINDS)) if isinstance(value, list) else []
        if unknown:
            raise ValueError(f"pause_on names {unknown}, which are not alerts; the alerts: {', '.join(ALERT_KINDS)}")
        return value
