"""Reward-hacking watch: alerts computed from step metrics and group stats.

Pure Python (no textual import) so it can be unit-tested and reused. The
engine does not compute alerts; the TUI feeds an :class:`AlertWatch` the step
rows and group summaries it reads from the store, in step order.

Five alerts (issue 6, part 5; the motivation is "watch your rollouts, don't
blindly trust the reward function"):

- ``reward_jump``: mean reward jumps after a plateau.
- ``perfect_share``: a suspicious share of perfect scores in one step.
- ``length_drift``: mean completion length drifts away from its early level.
- ``diversity_drop``: distinct-n within groups falls (mode collapse).
- ``judge_disagreement``: the judge ranks a group against the verifier.

Every alert is edge-triggered: it fires on the step where its condition
becomes true, not again while it stays true, so a long run does not drown the
panel. Memory is bounded: the watch keeps only a sliding window of steps.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from statistics import fmean

from pydantic import BaseModel, ConfigDict, Field


class AlertThresholds(BaseModel):
    """Configurable thresholds of the reward-hacking watch.

    Build it from a dict (e.g. a run config's ``"alerts"`` entry) with
    ``AlertThresholds.model_validate(d)``; unknown keys raise a
    ``pydantic.ValidationError`` naming the key, so typos are caught.
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
    min_rank_corr: float = Field(0.0, ge=-1, le=1, description="Spearman rho(judge, verifier) below this is disagreement.")
    disagreement_share: float = Field(0.5, gt=0, le=1, description="Share of judged groups of a step that must disagree.")


@dataclass(frozen=True)
class GroupStats:
    """What the watch needs of one group.

    ``rewards`` are verifier rewards (floats, one per trajectory),
    ``completions`` the trajectories' final texts, ``judge_scores`` the
    judge's scores in [0, 1] (None where the group was not judged).
    """

    step: int
    group_id: int
    rewards: list[float]
    completions: list[str]
    judge_scores: list[float | None] = field(default_factory=list)


@dataclass(frozen=True)
class Alert:
    """One alert: its kind, the step that raised it, a sentence, the groups to open."""

    kind: str
    step: int
    message: str
    group_ids: tuple[int, ...] = ()
    value: float | None = None


def distinct_n(completions: list[str], n: int) -> float:
    """Distinct-n of a group: unique word n-grams / all word n-grams, in [0, 1].

    Li et al. 2016, "A Diversity-Promoting Objective Function for Neural
    Conversation Models", section 4.2, computed over the group's completions
    together. A completion with fewer than ``n`` words counts as one gram
    (its whole text), so a group of identical short answers scores 1/G.
    Returns 1.0 for an empty group.
    """
    grams: list[tuple[str, ...]] = []
    for text in completions:
        words = text.split()
        if len(words) < n:
            grams.append(tuple(words))
        else:
            grams.extend(tuple(words[i : i + n]) for i in range(len(words) - n + 1))
    return len(set(grams)) / len(grams) if grams else 1.0


def _ranks(values: list[float]) -> list[float]:
    """Average ranks (1-based, ties share their mean rank)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(x: list[float], y: list[float]) -> float | None:
    """Spearman rank correlation of two equal-length lists (Pearson on average ranks).

    Returns None when it is undefined: fewer than two pairs, or one side
    constant (e.g. a group whose verifier rewards are all equal).
    """
    if len(x) != len(y):
        raise ValueError(f"spearman needs equal lengths, got {len(x)} and {len(y)}")
    if len(x) < 2:
        return None
    rx, ry = _ranks(x), _ranks(y)
    mx, my = fmean(rx), fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if sxx == 0 or syy == 0:
        return None
    return sxy / (sxx * syy) ** 0.5


class AlertWatch:
    """Stateful, edge-triggered alert detector; feed it steps in order.

    Call :meth:`observe` once per step with the step's metrics row (TRL names:
    ``reward``, ``completions/mean_length``) and the step's groups. State is a
    sliding window of ``thresholds.window`` steps plus the early baselines, so
    memory does not grow with the run.
    """

    def __init__(self, thresholds: AlertThresholds | None = None) -> None:
        self.thresholds = thresholds or AlertThresholds()
        self._rewards: deque[float] = deque(maxlen=self.thresholds.window)
        self._early_length: list[float] = []
        self._early_distinct: list[float] = []
        self._active: set[str] = set()
        self.last_step: int | None = None

    def observe(self, step: int, metrics: dict, groups: list[GroupStats]) -> list[Alert]:
        """Check one step; return the alerts that start at this step.

        Raises ValueError when steps are fed out of order (each step once,
        increasing), since the plateau window and baselines depend on order.
        """
        if self.last_step is not None and step <= self.last_step:
            raise ValueError(f"steps must increase: got {step} after {self.last_step}")
        self.last_step = step
        found = [
            self._reward_jump(step, metrics.get("reward")),
            self._perfect_share(step, groups),
            self._length_drift(step, metrics.get("completions/mean_length"), groups),
            self._diversity_drop(step, groups),
            self._judge_disagreement(step, groups),
        ]
        fired = []
        for kind, alert in found:
            if alert is None:
                self._active.discard(kind)
            elif kind not in self._active:
                self._active.add(kind)
                fired.append(alert)
        return fired

    def _reward_jump(self, step: int, reward: float | None) -> tuple[str, Alert | None]:
        kind, th, window = "reward_jump", self.thresholds, self._rewards
        if reward is None:
            return kind, None
        alert = None
        if len(window) == window.maxlen and max(window) - min(window) <= th.plateau_range:
            base = fmean(window)
            if reward - base >= th.jump:
                alert = Alert(kind, step, f"mean reward jumped {base:.2f} -> {reward:.2f} after a "
                              f"{len(window)}-step plateau", value=reward - base)
        window.append(reward)
        return kind, alert

    def _perfect_share(self, step: int, groups: list[GroupStats]) -> tuple[str, Alert | None]:
        kind, th = "perfect_share", self.thresholds
        rewards = [r for g in groups for r in g.rewards]
        if not rewards:
            return kind, None
        share = sum(r >= th.perfect_reward for r in rewards) / len(rewards)
        if share < th.perfect_share:
            return kind, None
        ids = tuple(g.group_id for g in groups if all(r >= th.perfect_reward for r in g.rewards))
        return kind, Alert(kind, step, f"{share:.0%} of rewards are perfect (>= {th.perfect_reward:g})",
                           ids, share)

    def _length_drift(self, step: int, length: float | None,
                      groups: list[GroupStats]) -> tuple[str, Alert | None]:
        kind, th = "length_drift", self.thresholds
        if length is None:
            return kind, None
        if len(self._early_length) < th.window:
            self._early_length.append(length)
            return kind, None
        base = fmean(self._early_length)
        change = (length - base) / base if base > 0 else 0.0
        if abs(change) < th.length_drift:
            return kind, None
        # Open the groups that drifted most: longest completions for a rise, shortest for a fall.
        mean_chars = {g.group_id: fmean(map(len, g.completions)) for g in groups if g.completions}
        ids = tuple(sorted(mean_chars, key=mean_chars.__getitem__, reverse=change > 0)[:5])
        return kind, Alert(kind, step, f"completion length {base:.1f} -> {length:.1f} tokens "
                           f"({change:+.0%})", ids, change)

    def _diversity_drop(self, step: int, groups: list[GroupStats]) -> tuple[str, Alert | None]:
        kind, th = "diversity_drop", self.thresholds
        if not groups:
            return kind, None
        per_group = {g.group_id: distinct_n(g.completions, th.distinct_n) for g in groups}
        mean = fmean(per_group.values())
        if len(self._early_distinct) < th.window:
            self._early_distinct.append(mean)
            return kind, None
        base = fmean(self._early_distinct)
        if base <= 0 or (base - mean) / base < th.diversity_drop:
            return kind, None
        ids = tuple(sorted(per_group, key=per_group.__getitem__)[:5])
        return kind, Alert(kind, step, f"distinct-{th.distinct_n} within groups fell "
                           f"{base:.2f} -> {mean:.2f}", ids, mean)

    def _judge_disagreement(self, step: int, groups: list[GroupStats]) -> tuple[str, Alert | None]:
        kind, th = "judge_disagreement", self.thresholds
        judged, disagree = 0, []
        for g in groups:
            if not g.judge_scores or any(s is None for s in g.judge_scores):
                continue
            rho = spearman(g.rewards, [float(s) for s in g.judge_scores])
            if rho is None:
                continue
            judged += 1
            if rho < th.min_rank_corr:
                disagree.append(g.group_id)
        if not judged or len(disagree) / judged < th.disagreement_share:
            return kind, None
        return kind, Alert(kind, step, f"judge and verifier disagree on {len(disagree)}/{judged} "
                           f"judged groups (Spearman rho < {th.min_rank_corr:g})",
                           tuple(disagree), len(disagree) / judged)
