"""Old-versus-new reward figures for a reward edit's dry run.

Given the rewards the applied rubric and the edited rubric give the same
stored groups, say what would change: mean reward, reward distribution, which
groups change their ranking, and Kendall's tau-b per group. Pure numpy; the
scoring itself happens in ``engine.rewards.edit.check``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel

from rlab.engine.rewards.judge.agreement import kendall_tau

#: Number of histogram bins of the reward distribution.
DEFAULT_BINS = 10


class GroupComparison(BaseModel):
    """One group's rewards under the old and the new rubric.

    Attributes:
        index: position of the group in the dry run's input.
        old_rewards / new_rewards: per-trajectory total rewards, same order.
        old_mean / new_mean: their means.
        tau: Kendall tau-b between old and new rewards (engine.rewards.judge.agreement),
            None when undefined (fewer than 2 trajectories, or all old or
            all new rewards equal).
        ranking_changed: some pair of trajectories compares differently
            (better / tied / worse) under the new rewards than under the old.
            Shifting or scaling the rewards by a positive factor leaves the
            ranking, and so the sign pattern of GRPO advantages, unchanged.
        best_changed: the set of top-rewarded trajectories differs.
    """

    index: int
    old_rewards: list[float]
    new_rewards: list[float]
    old_mean: float
    new_mean: float
    tau: float | None
    ranking_changed: bool
    best_changed: bool


class DryRunReport(BaseModel):
    """Side-by-side figures of a reward edit on the last K groups.

    Attributes:
        groups: per-group comparisons, in input order.
        old_mean / new_mean: mean reward over all trajectories (nan when
            there are none).
        groups_ranking_changed: how many groups change their ranking.
        mean_tau: mean of the defined per-group taus, or None.
        bin_edges: ``bins + 1`` edges spanning old and new rewards together,
            so the two histograms are comparable.
        old_counts / new_counts: trajectories per bin.
        old_errors / new_errors: trajectories whose scoring errored (reward 0).
        first_error: the first new-rubric error message, or None.
    """

    groups: list[GroupComparison]
    old_mean: float
    new_mean: float
    groups_ranking_changed: int
    mean_tau: float | None
    bin_edges: list[float]
    old_counts: list[int]
    new_counts: list[int]
    old_errors: int = 0
    new_errors: int = 0
    first_error: str | None = None


def ranking_changed(old: Sequence[float], new: Sequence[float]) -> bool:
    """True when some pair i < j has sign(old_i - old_j) != sign(new_i - new_j)."""
    a, b = np.asarray(old, dtype=np.float64), np.asarray(new, dtype=np.float64)
    return bool(np.any(np.sign(a[:, None] - a[None, :]) != np.sign(b[:, None] - b[None, :])))


def best_changed(old: Sequence[float], new: Sequence[float]) -> bool:
    """True when the set of trajectories with the top reward differs."""
    a, b = np.asarray(old, dtype=np.float64), np.asarray(new, dtype=np.float64)
    if a.size == 0:
        return False
    return not np.array_equal(np.flatnonzero(a == a.max()), np.flatnonzero(b == b.max()))


def compare_groups(
    old: Sequence[Sequence[float]],
    new: Sequence[Sequence[float]],
    *,
    bins: int = DEFAULT_BINS,
    old_errors: int = 0,
    new_errors: int = 0,
    first_error: str | None = None,
) -> DryRunReport:
    """Compare per-group rewards of the old and the new rubric.

    Args:
        old: one list of total rewards per group (finite floats).
        new: the same groups and trajectories under the new rubric.
        bins: histogram bins (>= 1) over [min, max] of all rewards; when all
            rewards are equal the range is [v - 0.5, v + 0.5].
        old_errors / new_errors / first_error: copied into the report.

    Raises:
        ValueError: the group counts or a group's sizes differ, a reward is
            not finite, or ``bins`` < 1.
    """
    if len(old) != len(new):
        raise ValueError(f"old and new must hold the same groups: {len(old)} vs {len(new)}")
    if bins < 1:
        raise ValueError(f"bins must be at least 1, got {bins}")
    groups = []
    for k, (o, n) in enumerate(zip(old, new)):
        if len(o) != len(n):
            raise ValueError(f"group {k}: {len(o)} old rewards but {len(n)} new ones")
        groups.append(
            GroupComparison(
                index=k,
                old_rewards=[float(x) for x in o],
                new_rewards=[float(x) for x in n],
                old_mean=float(np.mean(o)) if len(o) else float("nan"),
                new_mean=float(np.mean(n)) if len(n) else float("nan"),
                tau=kendall_tau(o, n),
                ranking_changed=ranking_changed(o, n),
                best_changed=best_changed(o, n),
            )
        )
    flat_old = np.asarray([x for g in old for x in g], dtype=np.float64)
    flat_new = np.asarray([x for g in new for x in g], dtype=np.float64)
    both = np.concatenate([flat_old, flat_new])
    if not np.all(np.isfinite(both)):
        raise ValueError("rewards must be finite; a scoring error should have given reward 0")
    low, high = (float(both.min()), float(both.max())) if both.size else (0.0, 1.0)
    if low == high:
        low, high = low - 0.5, high + 0.5
    edges = np.linspace(low, high, bins + 1)
    taus = [g.tau for g in groups if g.tau is not None]
    return DryRunReport(
        groups=groups,
        old_mean=float(flat_old.mean()) if flat_old.size else float("nan"),
        new_mean=float(flat_new.mean()) if flat_new.size else float("nan"),
        groups_ranking_changed=sum(g.ranking_changed for g in groups),
        mean_tau=float(np.mean(taus)) if taus else None,
        bin_edges=edges.tolist(),
        old_counts=np.histogram(flat_old, edges)[0].tolist(),
        new_counts=np.histogram(flat_new, edges)[0].tolist(),
        old_errors=old_errors,
        new_errors=new_errors,
        first_error=first_error,
    )
