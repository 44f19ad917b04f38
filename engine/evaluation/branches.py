"""``rlab compare PARENT FORK --from-step N``: two training branches' held-out pass@1 at matched steps.

A fork (``engine.run.fork``) and its parent number their steps alike, and every
held-out evaluation stores each example's verdict (an ``eval`` event). So
after the fork step the two branches' evals pair example by example at
every step both evaluated. The locked room here is the held-out one: the
eval split, the prompt, what counts as solved, and the eval's size and
length limit; the reward functions and the training sampling may differ,
since a branch exists to change them.

Per matched step: both pass@1 over the examples both judged, the difference,
and McNemar's exact test on the discordant examples (McNemar 1947; the
paired test of ``rlab compare``). Over all matched steps: each example's
pass rate across them, the mean difference and its paired bootstrap interval
(Efron & Tibshirani 1993, ch. 13), examples resampled.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from rlab.engine.evaluation.compare import FieldDifference, locked_room
from rlab.engine.evaluation.stats import Interval, mcnemar_exact, paired_bootstrap
from rlab.store.reader import StoreReader, resolve_run
from rlab.store.rows import RunRow

#: What two branches' held-out evals must share to be compared.
HELD_OUT_FIELDS = ("eval_split", "prompt", "success", "held_out")
#: What two branches may differ in and the comparison names: the treatment (the
#: tools offered, ``--no-tools``; the model; a real model's warm start, ``--no-warm-start``),
#: beside the reward and settings a fork changes.
TREATMENT_FIELDS = ("tools", "model", "warm_start")
#: The leaves of the warm start a comparison names; its figures and cache key are its own.
WARM_START_NAMED = ("warm_start.on", "warm_start.steps")


@dataclass(frozen=True)
class MatchedStep:
    """One step both branches evaluated: pass@1 of A and B over the ``n`` examples
    both judged, B - A, McNemar's exact p, and the discordant counts."""

    step: int
    n: int
    pass_at_1_a: float
    pass_at_1_b: float
    difference: float
    mcnemar_p: float
    gained: int
    lost: int


@dataclass
class BranchComparison:
    """Two branches at matched steps after ``from_step`` (see the module doc).

    differences: held-out room fields that differ (empty: comparable).
    treatments: the treatment fields that differ (:data:`TREATMENT_FIELDS`: what
    was tested, named beside the numbers). steps: the matched steps, in order. pooled_*: each example's pass rate
    over the matched steps, averaged; interval: the 95 % paired bootstrap
    interval of their difference. reason: why there are no numbers.
    """

    run_a: dict[str, Any]
    run_b: dict[str, Any]
    from_step: int
    differences: list[FieldDifference]
    treatments: list[FieldDifference] = field(default_factory=list)
    steps: list[MatchedStep] = field(default_factory=list)
    pooled_a: float | None = None
    pooled_b: float | None = None
    interval: Interval | None = None
    reason: str | None = None

    @property
    def comparable(self) -> bool:
        """True when the branches' held-out evals are in one room."""
        return not self.differences

    def to_json(self) -> dict[str, Any]:
        """As one JSON-ready object (``rlab compare --json``), with ``comparable``."""
        return asdict(self) | {"comparable": self.comparable}


def held_out_room(run: RunRow) -> dict[str, Any]:
    """The manifest fields a run's held-out pass@1 depends on."""
    manifest, config = run["manifest"] or {}, run["config"] or {}
    return {"eval_split": (manifest.get("dataset") or {}).get("eval_sha256"), "prompt": manifest.get("prompt"),
            "success": (manifest.get("scorer") or {}).get("success"),
            "held_out": {"eval_size": config.get("eval_size"), "max_new_tokens": config.get("max_new_tokens")}}


def treatments(a: RunRow, b: RunRow) -> list[FieldDifference]:
    """The :data:`TREATMENT_FIELDS` leaves that differ between two runs' manifests (tool
    schemas, weight hashes and the warm start's figures left out: the names, paths and
    :data:`WARM_START_NAMED` say what differs)."""
    return [d for d in locked_room(a["manifest"] or {}, b["manifest"] or {}, TREATMENT_FIELDS)
            if not d.field.endswith(("schemas", "schemas_sha256", "weights_sha256"))
            and (not d.field.startswith("warm_start.") or d.field in WARM_START_NAMED)]


def fork_step(a: RunRow, b: RunRow) -> int | None:
    """The step one run forked from the other at, or None when neither is the other's fork."""
    for parent, child in ((a, b), (b, a)):
        if child.get("parent_id") == parent["id"]:
            return child.get("fork_step")
    return None


def both_trained(a: RunRow, b: RunRow) -> bool:
    """Whether two runs are training runs, which compare by their held-out evals at matched
    steps (:func:`compare_branches`), not by their trajectories (training samples)."""
    return a.get("kind", "train") == "train" and b.get("kind", "train") == "train"


def compare_branches(reader: StoreReader, run_a: str | int, run_b: str | int, from_step: int | None = None,
                     *, force: bool = False) -> BranchComparison:
    """Compare two training runs' held-out evals at the steps after ``from_step``
    (None: the fork step when one run forked from the other, else 0: two arms started
    alike) that both evaluated.

    Raises:
        RunNotFoundError: no such run.
    """
    row_a, row_b = resolve_run(reader, run_a), resolve_run(reader, run_b)
    start = from_step if from_step is not None else fork_step(row_a, row_b) or 0
    result = BranchComparison({"id": row_a["id"], "name": row_a["name"]}, {"id": row_b["id"], "name": row_b["name"]},
                              start, locked_room(held_out_room(row_a), held_out_room(row_b), HELD_OUT_FIELDS),
                              treatments=treatments(row_a, row_b))
    if result.differences and not force:
        result.reason = "the branches' held-out evals are not in one room; --force shows the numbers anyway"
        return result
    evals_a, evals_b = _evals(reader, row_a["id"], start), _evals(reader, row_b["id"], start)
    matched = sorted(evals_a.keys() & evals_b.keys())
    if not matched:
        result.reason = (f"no step after {start} has a held-out eval in both runs (each evaluates every "
                         "--eval-every steps; train them on, give both the same --eval-every, or measure a "
                         "checkpoint of each with rlab eval --checkpoint RUN@STEP and compare those eval runs)")
        return result
    result.steps = [_matched(step, evals_a[step], evals_b[step]) for step in matched]
    examples = sorted({k for s in matched for k in evals_a[s].keys() & evals_b[s].keys()}, key=str)
    rates = np.array([[np.mean([by_step[s][k] for s in matched if k in by_step[s]]) for k in examples]
                      for by_step in (evals_a, evals_b)])
    result.pooled_a, result.pooled_b = float(rates[0].mean()), float(rates[1].mean())
    result.interval = paired_bootstrap(rates[0], rates[1])
    return result


def _evals(reader: StoreReader, run_id: int, after: int) -> dict[int, dict[Any, int]]:
    """The run's held-out verdicts by step after ``after``: step -> example id -> 1 / 0 (no verdict left out)."""
    out: dict[int, dict[Any, int]] = {}
    for event in reader.events(run_id):
        step = event["step"]
        if event["kind"] == "eval" and step is not None and step > after:
            payload = event["payload"]
            out[step] = {k: v for k, v in zip(payload["example_ids"], payload["passed"]) if v is not None}
    return out


def _matched(step: int, a: dict[Any, int], b: dict[Any, int]) -> MatchedStep:
    common = [k for k in a if k in b]
    gained = sum(1 for k in common if b[k] > a[k])
    lost = sum(1 for k in common if b[k] < a[k])
    pass_a = float(np.mean([a[k] for k in common])) if common else float("nan")
    pass_b = float(np.mean([b[k] for k in common])) if common else float("nan")
    return MatchedStep(step, len(common), pass_a, pass_b, pass_b - pass_a, mcnemar_exact(lost, gained), gained, lost)
