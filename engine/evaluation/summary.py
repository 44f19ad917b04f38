"""The summary of an eval or select run: pass@1, mean reward, failure modes, pass@k."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlab.engine.evaluation.measure import Attempt
from rlab.engine.evaluation.stats import mean_pass_at_k
from rlab.engine.rewards.success import SuccessRule
from rlab.store.export import failure_mode
from rlab.store.errors import UsageError

SELECTION_NOTE = ("the model did not change: selection draws N samples from the same policy and "
                  "keeps the best, so pass@N - pass@1 is what selection buys, not learning")


def default_ks(n: int) -> list[int]:
    """1, 2, 4, ... up to ``n``, and ``n`` itself."""
    ks = [1 << i for i in range(n.bit_length()) if 1 << i <= n]
    return ks if ks[-1] == n else ks + [n]


def check_ks(ks: list[int], n: int) -> list[int]:
    """``ks`` sorted and de-duplicated.

    Raises:
        ValueError: a k outside 1..n (pass@k needs k samples per prompt).
    """
    bad = [k for k in ks if not 1 <= k <= n]
    if bad:
        raise UsageError(f"--k {','.join(map(str, bad))}: pass@k needs 1 <= k <= N = {n} "
                         "samples per prompt; raise -n or drop those k")
    return sorted(set(ks))


def summarize(examples: list[dict], attempts: list[list[Attempt]], success: SuccessRule,
              ks: list[int] | None = None) -> dict[str, Any]:
    """The run summary: ``success`` (what counts as solved: ``success.label``;
    an attempt without a verdict, an errored score, counts as not solved),
    ``n`` (examples), ``samples_per_example``,
    ``pass_at_1`` (unbiased, the mean of c_i / n_i), ``mean_reward`` (over
    every attempt), ``failures`` (failing attempts by ``store.export.failure_mode``,
    their parse status with a wrong answer as ``wrong`` -> ``{"count", "example_id"}``
    of the first one) and, when ``ks`` is given
    (loop B), ``pass_at_k`` ({"k": value}, Chen et al. 2021 eq. 1),
    ``best_of_n`` (mean best reward, share of examples whose best passes),
    ``selection_gap`` (pass@N - pass@1) and ``note`` (the model did not change).
    """
    def passed(attempt: Attempt) -> bool:
        return bool(success.passed(attempt.score))

    outcomes = [[passed(a) for a in row] for row in attempts]
    rewards = [a.reward for row in attempts for a in row]
    failures: dict[str, dict[str, Any]] = {}
    for example, row in zip(examples, attempts):
        for attempt in row:
            if not passed(attempt):
                status = failure_mode(attempt.score.details.get("parse_status"))
                entry = failures.setdefault(status, {"count": 0, "example_id": example["id"]})
                entry["count"] += 1
    summary: dict[str, Any] = {
        "success": success.label,
        "n": len(examples),
        "samples_per_example": len(attempts[0]) if attempts else 0,
        "pass_at_1": mean_pass_at_k(outcomes, 1) if outcomes else 0.0,
        "mean_reward": float(np.mean(rewards)) if rewards else 0.0,
        "failures": dict(sorted(failures.items(), key=lambda kv: -kv[1]["count"])),
    }
    if ks is not None and outcomes:
        n = len(attempts[0])
        summary["pass_at_k"] = {str(k): mean_pass_at_k(outcomes, k) for k in ks}
        best = [max(a.reward for a in row) for row in attempts]
        best_passed = [passed(max(row, key=lambda a: a.reward)) for row in attempts]
        summary["best_of_n"] = {"n": n, "mean_reward": float(np.mean(best)),
                                "pass_rate": float(np.mean(best_passed))}
        summary["selection_gap"] = mean_pass_at_k(outcomes, n) - summary["pass_at_1"]
        summary["model_changed"] = False
        summary["note"] = SELECTION_NOTE
    return summary
