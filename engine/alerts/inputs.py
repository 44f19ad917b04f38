"""What the watch (``engine.alerts``) reads of a step besides its metrics: each group's stats,
their distinct-n, and the rubric's scale of reward."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from rlab.store.records import GroupRecord


@dataclass(frozen=True)
class GroupStats:
    """What the watch needs of one group.

    ``rewards`` are verifier rewards (floats, one per trajectory),
    ``completions`` the trajectories' final texts, ``judge_scores`` the
    judge's scores in [0, 1] (None where the group was not judged),
    ``successes`` the declared success verdicts (``engine.rewards.success``; None:
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
    together. Words are what ``str.split()`` gives. A completion with fewer
    than ``n`` words counts as one gram (its whole text), so a group of
    identical short answers scores 1/G. Returns 1.0 for an empty group.

    ASCII text is counted by :func:`_hashed_counts` (numpy, about 10x less
    time holding the GIL: the TUI replays this for every streamed step),
    other text word by word in Python; both give the same counts.
    """
    counted = _hashed_counts(completions, n)
    unique, total = counted if counted is not None else _counts(completions, n)
    return unique / total if total else 1.0


def _counts(completions: list[str], n: int) -> tuple[int, int]:
    """(distinct n-grams, all n-grams), word by word."""
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
    return len(unique), total


#: The bytes ``str.split()`` splits ASCII text at.
_ASCII_SPACE = np.zeros(256, dtype=bool)
_ASCII_SPACE[[9, 10, 11, 12, 13, 28, 29, 30, 31, 32]] = True
_BASE = 0x100000001B3  # odd (FNV-1's prime), so it has an inverse modulo 2**64
_BASE_INVERSE = pow(_BASE, -1, 1 << 64)
_MIX = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing's multiplier: spreads the bits
_POWERS: dict[int, np.ndarray] = {}


def _hashed_counts(completions: list[str], n: int) -> tuple[int, int] | None:
    """(distinct n-grams, all n-grams) of ASCII ``completions`` from 64-bit hashes of
    their words; None when a completion is not ASCII (its whitespace is not only bytes).

    Each word's hash is a polynomial hash of its bytes (Karp and Rabin 1987), taken
    for every word at once from prefix sums modulo 2**64, mixed with its length;
    an n-gram's hash mixes its words' hashes. Two distinct n-grams of a group count
    as one only if their 64-bit hashes collide: with the 10,000 bigrams of eight
    8,000-character completions, a chance below 3e-12.
    """
    joined = "\n".join(completions)  # "\n" is whitespace: no word runs across two completions
    if not joined.isascii():
        return None
    data = np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
    edges = np.diff((~_ASCII_SPACE[data]).astype(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    owner = np.searchsorted(np.cumsum([len(text) + 1 for text in completions]), starts, side="right")
    words = np.bincount(owner, minlength=len(completions))
    short = {tuple(text.split()) for text, count in zip(completions, words) if count < n}
    with np.errstate(over="ignore"):  # every product below is meant modulo 2**64
        prefix = np.concatenate(([np.uint64(0)], np.cumsum(data * _powers(_BASE_INVERSE, len(data)),
                                                              dtype=np.uint64)))
        hashes = (prefix[ends] - prefix[starts]) * _powers(_BASE, len(data))[ends - 1]
        hashes = (hashes ^ (ends - starts).astype(np.uint64)) * _MIX
        count = len(hashes) - n + 1
        codes = hashes[:max(count, 0)].copy()
        for i in range(1, n):
            codes = (codes * _MIX) ^ hashes[i:i + count]
            codes ^= codes >> np.uint64(29)
    grams = np.sort(codes[owner[:len(codes)] == owner[n - 1:n - 1 + len(codes)]])  # inside one completion
    distinct = int(grams.size and 1 + np.count_nonzero(grams[1:] != grams[:-1]))
    return len(short) + distinct, int((words < n).sum()) + int(grams.size)


def _powers(base: int, count: int) -> np.ndarray:
    """``base ** k`` modulo 2**64 for k < ``count`` (uint64), cached and grown as texts grow."""
    known = _POWERS.get(base)
    if known is None or len(known) < count:
        size = max(count, 1 << 16, 2 * len(known) if known is not None else 0)
        factors = np.full(size, base, dtype=np.uint64)
        factors[0] = 1
        known = _POWERS[base] = np.cumprod(factors, dtype=np.uint64)
    return known[:count]


def reward_scale(weights: Mapping[str, float]) -> float:
    """The most reward a trajectory can earn when every function scores 1: the
    sum of the positive weights (at least 1), the hack alert's unit of reward."""
    return max(1.0, sum(w for w in weights.values() if w > 0))
