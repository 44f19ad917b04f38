"""Terminal output of ``rlab eval``, ``select``, ``compare`` and ``inspect``
(rich tables); the numbers come from ``rlab.engine.evaluation``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from rlab.engine.cli.formatting import fmt

PERCENT = ".1%"
"""How pass rates are shown (a :func:`engine.cli.formatting.fmt` spec)."""


def loop_report(kind: str, name: str, summary: dict[str, Any], artifacts: dict[str, Any]) -> Group:
    """An eval or select run's summary: pass@1, mean reward, failures, pass@k."""
    head = Table(title=f"{kind} run {name}", show_header=False, box=None)
    head.add_row("examples", str(summary["n"]))
    head.add_row("samples per example", str(summary["samples_per_example"]))
    head.add_row("pass@1", fmt(summary["pass_at_1"], PERCENT))
    head.add_row("mean reward", f"{summary['mean_reward']:.3f}")
    parts: list[Any] = [head]
    if summary.get("pass_at_k"):
        ks = Table(title="pass@k (Chen et al. 2021, unbiased)")
        ks.add_column("k", justify="right")
        ks.add_column("pass@k", justify="right")
        for k, value in summary["pass_at_k"].items():
            ks.add_row(k, fmt(value, PERCENT))
        parts.append(ks)
        best = summary["best_of_n"]
        parts.append(Text(f"best-of-{best['n']} by reward: mean reward {best['mean_reward']:.3f}, "
                          f"pass {fmt(best['pass_rate'], PERCENT)}; selection gap pass@{best['n']} - pass@1 = "
                          f"{summary['selection_gap']:+.1%}"))
        parts.append(Text(summary["note"], style="italic"))
    if summary["failures"]:
        failures = Table(title="failure modes (failing trajectories by parse_status; a parsed wrong answer: wrong)")
        for column in ("status", "count", "e.g. example"):
            failures.add_column(column)
        for status, entry in summary["failures"].items():
            failures.add_row(status, str(entry["count"]), str(entry["example_id"]))
        parts.append(failures)
    for what, path in artifacts.items():
        parts.append(Text(f"{what}: {path}", style="dim"))
    return Group(*parts)


def comparison_report(result: dict[str, Any], max_flips: int = 20) -> Group:
    """The locked-room verdict first, then the paired difference, then at most
    ``max_flips`` flipped examples (and how many more there are).
    ``result`` is ``Comparison.to_json()``."""
    a, b = result["run_a"], result["run_b"]
    parts: list[Any] = []
    if result["comparable"]:
        parts.append(Text(f"same room: {a['name']} (A) and {b['name']} (B) agree on dataset, prompt, "
                          "scorer, sampling and split", style="bold green"))
    else:
        verdict = Table(title=f"NOT COMPARABLE: {len(result['differences'])} locked field(s) differ",
                        title_style="bold red")
        for column in ("field", f"A: {a['name']}", f"B: {b['name']}"):
            verdict.add_column(column, overflow="fold")
        for diff in result["differences"]:
            verdict.add_row(diff["field"], json.dumps(diff["a"]), json.dumps(diff["b"]))
        parts.append(verdict)
        if result["forced"]:
            parts.append(Panel("--force: the numbers below compare different experiments; "
                               "they are not evidence of a change", style="bold yellow"))
    paired = result["paired"]
    if paired is None:
        if result["reason"]:
            parts.append(Text(result["reason"], style="yellow"))
        return Group(*parts)
    interval = paired["interval"]
    p = fmt(paired["mcnemar_p"], ".4g")
    numbers = Table(title=f"paired over {paired['n']} examples", show_header=False, box=None)
    numbers.add_row("pass@1 A / B",
                    f"{fmt(paired['pass_at_1_a'], PERCENT)} / {fmt(paired['pass_at_1_b'], PERCENT)}")
    numbers.add_row("difference B - A", f"{paired['difference']:+.1%}  "
                    f"(95 % paired bootstrap {interval['low']:+.1%} .. {interval['high']:+.1%})")
    numbers.add_row("McNemar exact p", f"{p}  (gained {paired['gained']}, lost {paired['lost']})")
    if paired["unpaired"]:
        numbers.add_row("left out", f"{paired['unpaired']} examples measured by one run only")
    parts.append(numbers)
    flips = paired["flips"]
    if flips and max_flips > 0:
        parts.append(flips_table(flips[:max_flips]))
    if len(flips) > max(max_flips, 0):
        parts.append(Text(f"{len(flips) - max(max_flips, 0)} more flipped examples: --flips N lists more, "
                          "--json or --out DIR holds them all", style="dim"))
    return Group(*parts)


def branches_report(result: dict[str, Any]) -> Group:
    """Two training branches at matched held-out steps (``BranchComparison.to_json()``):
    the room verdict, a row per matched step, the pooled difference."""
    a, b = result["run_a"], result["run_b"]
    parts: list[Any] = []
    if result["comparable"]:
        parts.append(Text(f"same held-out room: {a['name']} (A) and {b['name']} (B) evaluate the same split, "
                          "prompt and success rule", style="bold green"))
    else:
        parts.append(Text("NOT COMPARABLE: " + "; ".join(
            f"{d['field']}: {json.dumps(d['a'])} vs {json.dumps(d['b'])}" for d in result["differences"]),
            style="bold red"))
    for diff in result.get("treatments") or []:
        parts.append(Text(f"treatment: {diff['field']}: A {json.dumps(diff['a'])}, B {json.dumps(diff['b'])}",
                          style="bold"))
    if not result["steps"]:
        parts.append(Text(result["reason"] or "no matched steps", style="yellow"))
        return Group(*parts)
    table = Table(title=f"held-out pass@1 at the steps after {result['from_step']} both evaluated")
    for column in ("step", "n", f"A {a['name']}", f"B {b['name']}", "B - A", "McNemar p", "gained", "lost"):
        table.add_column(column, justify="right")
    for m in result["steps"]:
        table.add_row(str(m["step"]), str(m["n"]), fmt(m["pass_at_1_a"], PERCENT), fmt(m["pass_at_1_b"], PERCENT),
                      f"{m['difference']:+.1%}", fmt(m["mcnemar_p"], ".3g"), str(m["gained"]), str(m["lost"]))
    parts.append(table)
    interval = result["interval"]
    parts.append(Text(f"over the {len(result['steps'])} matched steps: A {fmt(result['pooled_a'], PERCENT)}, "
                      f"B {fmt(result['pooled_b'], PERCENT)}, B - A {result['pooled_b'] - result['pooled_a']:+.1%} "
                      f"(95 % paired bootstrap {interval['low']:+.1%} .. {interval['high']:+.1%})"))
    return Group(*parts)


def flips_table(flips: list[dict[str, Any]]) -> Table:
    """The examples that flipped, with both runs' trajectory ids and rewards."""
    table = Table(title="flipped examples")
    for column in ("example", "flip", "traj A", "reward A", "traj B", "reward B"):
        table.add_column(column)
    for flip in flips:
        table.add_row(str(flip["example_id"]), flip["direction"], str(flip["trajectory_a"]),
                      f"{flip['reward_a']:.3f}", str(flip["trajectory_b"]), f"{flip['reward_b']:.3f}")
    return table


def inspect_report(run: Mapping[str, Any], rows: list[dict[str, Any]]) -> Group:
    """One panel per trajectory: prompt, completion, reward components, details."""
    parts: list[Any] = [Text(f"run {run['name']} ({run['kind']}): {len(rows)} lowest-reward trajectories",
                             style="bold")]
    for row in rows:
        table = Table(show_header=False, box=None)
        table.add_column(style="bold")
        table.add_column(overflow="fold")
        table.add_row("prompt", str(row["prompt"]))
        table.add_row("completion", str(row["completion"]))
        for name, value in (row["components"] or {}).items():
            table.add_row(f"  {name}", f"{value:.3f}" if isinstance(value, (int, float)) else str(value))
        table.add_row("details", json.dumps(row["details"], sort_keys=True, default=str))
        reward = fmt(row["reward"], ".3f")
        parts.append(Panel(table, title=f"trajectory {row['id']} · step {row['step']} · example "
                                        f"{row['example_id']} · reward {reward}", title_align="left"))
    return Group(*parts)


def show(renderable: Any) -> None:
    """Print to stdout (wide enough for the tables when piped)."""
    Console(width=None).print(renderable)
