"""What the watch (``engine.alerts``) reads of a step besides its metrics: each group's stats,
their distinct-n, and the rubric's scale of reward."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from rlab.store.records import GroupRecord


@dataclass(frozen=True)
class GroupStats:
    """What the watch needs of one group.

    ``rewards`` are verifier rewards (floats, one per trajectory),
    ``completions`` the trajectories' final texts, ``judge_scores`` the
    judge's scores in [0, 1] (None where the group was not judged),
    ``successes`` the declared success verdicts (``engine.success``; None:
    no verdict, e.g. an errored score; empty: not known), ``tool_calls``
    each trajectory's tool calls and ``tool_errors`` its failed ones (empty:
    not a tool task), ``looped`` whether it was cut at the turn limit while
    still calling.
    """

    step: int
    group_id: int
    rewards: list[float]
    completions: list[str]
    judge_scores: list[float | None] = field(default_factory=list)
    successes: list[bool | None] = field(default_factory=list)
    tool_calls: list[int] = field(default_factory=list)
    tool_errors: list[int] = field(default_factory=list)
    looped: list[bool] = field(default_factory=list)

    @classmethod
    def of_record(cls, step: int, group_id: int, group: GroupRecord) -> GroupStats:
        """The watch's view of a group the engine just stored as ``group_id``."""
        trajs = group.trajectories
        calls = [t.tool_calls for t in trajs if t.tool_calls is not None]
        # an errored trajectory (no reward) counts as 0 here; the run pauses on reward errors anyway
        return cls(step, group_id, [t.reward if t.reward is not None else 0.0 for t in trajs],
                   [t.completion for t in trajs], [t.judge_score for t in trajs], [t.success for t in trajs],
                   [len(c) for c in calls], [sum(x.error is not None for x in c) for c in calls],
                   [t.truncated and bool(c) for t, c in zip(trajs, calls)])

    @property
    def identical(self) -> bool:
        """Every completion of the group is the same text (a group of two or more)."""
        return len(self.completions) > 1 and len(set(self.completions)) == 1

    @property
    def solved(self) -> bool:
        """Every trajectory of the group solved its task (its success verdict is True)."""
        return bool(self.successes) and all(s is True for s in self.successes)


def distinct_n(completions: list[str], n: int) -> float:
    """Distinct-n of a group: unique word n-grams / all word n-grams, in [0, 1].

    Li et al. 2016, "A Diversity-Promoting Objective Function for Neural
    Conversation Models", section 4.2, computed over the group's completions
    together. A completion with fewer than ``n`` words counts as one gram
    (its whole text), so a group of identical short answers scores 1/G.
    Returns 1.0 for an empty group.
    """
    unique: set[tuple[str, ...]] = set()
    total = 0
    for text in completions:
        words = text.split()
        if len(words) < n:
            unique.add(tuple(words))
            total += 1
        else:  # zip builds the n-grams in C: 8,000-character completions are 1,300 words each
            unique.update(zip(*(words[i:] for i in range(n))))
            total += len(words) - n + 1
    return len(unique) / total if total else 1.0


def reward_scale(weights: Mapping[str, float]) -> float:
    """The most reward a trajectory can earn when every function scores 1: the
    sum of the positive weights (at least 1), the hack alert's unit of reward."""
    return max(1.0, sum(w for w in weights.values() if w > 0))
