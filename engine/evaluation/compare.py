"""``rlab compare``: the locked-room rule, then a paired comparison.

Two runs may be compared only when their manifests agree on every field
under ``engine.run.manifest.LOCKED_FIELDS`` (dataset, prompt/template, scorer,
sampling, split). When they do, both runs' results on the same example ids
are paired: the difference in pass@1 with a paired bootstrap interval,
McNemar's exact test on the discordant pairs, and the examples that flipped.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from rlab.engine.evaluation.stats import Interval, mcnemar_exact, paired_bootstrap
from rlab.engine.run.manifest import LOCKED_FIELDS
from rlab.store.reader import StoreReader, resolve_run
from rlab.store.rows import RunRow

MEASURED_KINDS = ("eval", "select")
"""Run kinds whose trajectories measure a fixed policy on a split."""


@dataclass(frozen=True)
class FieldDifference:
    """A locked manifest field (dotted path) whose values differ; None: absent."""

    field: str
    a: Any
    b: Any


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as ``{"a.b.c": leaf}`` (lists and scalars are leaves)."""
    if not isinstance(value, dict):
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, item in value.items():
        out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    return out


def locked_room(a: dict, b: dict, fields: tuple[str, ...] = LOCKED_FIELDS) -> list[FieldDifference]:
    """The leaves under ``fields`` whose values differ between two manifests,
    sorted by path; a leaf present in only one manifest differs (shown as None)."""
    fa = {k: v for k, v in flatten(a or {}).items() if k.split(".")[0] in fields}
    fb = {k: v for k, v in flatten(b or {}).items() if k.split(".")[0] in fields}
    missing = object()
    return [FieldDifference(k, fa.get(k), fb.get(k)) for k in sorted(fa.keys() | fb.keys())
            if fa.get(k, missing) != fb.get(k, missing)]


@dataclass(frozen=True)
class Flip:
    """An example whose outcome changed: ``gained`` (A fails, B passes) or
    ``lost``; the first trajectory of each run on it, and their rewards."""

    example_id: Any
    direction: str
    trajectory_a: int
    trajectory_b: int
    reward_a: float | None
    reward_b: float | None


@dataclass
class Paired:
    """The paired comparison over the ``n`` examples both runs measured.

    pass_at_1_a / _b: mean per-example pass rate (c_i / n_i). mean_reward_a /
    _b: mean reward over the paired examples' trajectories. difference:
    B - A. interval: its 95 % paired bootstrap interval (10,000 seeded
    resamples). mcnemar_p: McNemar's exact p-value, None unless both runs
    have one trajectory per example. gained / lost: discordant counts.
    unpaired: examples only one run measured (left out).
    """

    n: int
    pass_at_1_a: float
    pass_at_1_b: float
    mean_reward_a: float
    mean_reward_b: float
    difference: float
    interval: Interval
    mcnemar_p: float | None
    gained: int
    lost: int
    unpaired: int
    flips: list[Flip] = field(default_factory=list)


@dataclass
class Comparison:
    """The verdict on two runs and, when allowed (or forced), the numbers.

    differences: locked fields that differ (empty: same room). forced:
    numbers shown despite differences. paired: None when refused, or when a
    run did not measure examples (``reason`` says why).
    """

    run_a: dict[str, Any]
    run_b: dict[str, Any]
    differences: list[FieldDifference]
    forced: bool = False
    paired: Paired | None = None
    reason: str | None = None

    @property
    def comparable(self) -> bool:
        """True when every locked field agrees."""
        return not self.differences

    def to_json(self) -> dict[str, Any]:
        """The comparison as one JSON-ready object (``rlab compare --json``
        and its summary.json): the fields above, ``comparable``, and ``n``,
        ``pass_at_1`` and ``mean_reward`` ({"a", "b"}; None without numbers)."""
        out = asdict(self)
        paired = self.paired
        out.update(comparable=self.comparable, n=None if paired is None else paired.n,
                   pass_at_1=None if paired is None else {"a": paired.pass_at_1_a, "b": paired.pass_at_1_b},
                   mean_reward=None if paired is None else {"a": paired.mean_reward_a,
                                                            "b": paired.mean_reward_b})
        return out


def _ref(run: RunRow) -> dict[str, Any]:
    return {"id": run["id"], "name": run["name"], "kind": run["kind"], "scenario": run["scenario"]}


def per_example(reader: StoreReader, run_id: int) -> dict[Any, list[dict]]:
    """A measured run's step-0 trajectories grouped by example id, in write order."""
    out: dict[Any, list[dict]] = defaultdict(list)
    for row in reader.outcomes(run_id, step=0):
        out[row["example_id"]].append(row)
    return out


def _passes(rows: list[dict]) -> list[bool]:
    return [bool(r["passed"]) for r in rows]


def _mean_reward(rows: dict[Any, list[dict]], keys: list) -> float:
    rewards = [r["reward"] or 0.0 for k in keys for r in rows[k]]
    return float(np.mean(rewards))


def paired_comparison(a: dict[Any, list[dict]], b: dict[Any, list[dict]]) -> Paired | None:
    """Pair two runs' per-example results on their common example ids (A's order).

    Returns None when they share no example.
    """
    common = [key for key in a if key in b]
    if not common:
        return None
    score_a = np.array([np.mean(_passes(a[k])) for k in common])
    score_b = np.array([np.mean(_passes(b[k])) for k in common])
    binary = all(len(a[k]) == 1 and len(b[k]) == 1 for k in common)
    flips = []
    if binary:
        for key, sa, sb in zip(common, score_a, score_b):
            if sa != sb:
                flips.append(Flip(key, "gained" if sb > sa else "lost", a[key][0]["id"], b[key][0]["id"],
                                  a[key][0]["reward"], b[key][0]["reward"]))
    gained = sum(f.direction == "gained" for f in flips)
    lost = len(flips) - gained
    return Paired(
        n=len(common), pass_at_1_a=float(score_a.mean()), pass_at_1_b=float(score_b.mean()),
        mean_reward_a=_mean_reward(a, common), mean_reward_b=_mean_reward(b, common),
        difference=float(score_b.mean() - score_a.mean()), interval=paired_bootstrap(score_a, score_b),
        mcnemar_p=mcnemar_exact(lost, gained) if binary else None, gained=gained, lost=lost,
        unpaired=len(a.keys() ^ b.keys()), flips=flips)


def compare_runs(reader: StoreReader, run_a: str | int, run_b: str | int, *, force: bool = False) -> Comparison:
    """The locked-room verdict on two runs and, when allowed or forced, the
    paired comparison of their per-example results.

    Raises:
        RunNotFoundError: no such run.
    """
    row_a, row_b = resolve_run(reader, run_a), resolve_run(reader, run_b)
    result = Comparison(_ref(row_a), _ref(row_b), locked_room(row_a["manifest"], row_b["manifest"]),
                        forced=force)
    if result.differences and not force:
        result.reason = "the runs are not in the same room; --force shows the numbers anyway"
        return result
    unmeasured = [r["name"] for r in (row_a, row_b) if r["kind"] not in MEASURED_KINDS]
    if unmeasured:
        result.reason = (f"{', '.join(repr(n) for n in unmeasured)} trained (kind train): its "
                         "trajectories are training samples, not a measurement; measure it with "
                         "`rlab eval --checkpoint RUN` and compare the eval runs")
        return result
    result.paired = paired_comparison(per_example(reader, row_a["id"]), per_example(reader, row_b["id"]))
    if result.paired is None:
        result.reason = "the runs share no example id"
    return result
