"""The tool scenario's learning benchmark: with its tools and without, side by side (issue 45).

    python tests/bench/tool_agent.py --seconds 300 --db /tmp/agent.db          # tiny policy, both arms
    python tests/bench/tool_agent.py --seconds 900 --arms tools --db /tmp/agent.db \\
        -- --model smollm2-135m --lora-rank 16                                 # SmolLM2 + LoRA

Builds (or reuses) the calculator's tiny policy first (its build is not
counted), then trains ``rlab run --headless --scenario calculator`` for the
same wall-clock budget and seed once with the tools (``tools``) and once with
``--no-tools`` (``no_tools``), one after the other, into one run file, and
prints one JSON object: per arm the held-out greedy pass@1 and tool-use rate
before and after, the first time pass@1 reached ``--target``, the eval curve,
steps and seconds; and ``rlab compare TOOLS NO_TOOLS --from-step 0``'s
verdict at the steps both evaluated (the tools are the treatment). Options
after ``--`` go to both ``rlab run`` calls.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from rlab.engine.policy.device import describe_machine  # noqa: E402
from rlab.engine.train.warm_start import ensure_tiny_model  # noqa: E402
from rlab.scenarios import get_scenario  # noqa: E402
from rlab.store.reader import StoreReader  # noqa: E402

ARMS = {"tools": [], "no_tools": ["--no-tools"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", type=float, default=0.8)
    parser.add_argument("--arms", default="tools,no_tools", help="comma-separated: tools, no_tools")
    parser.add_argument("--db", type=Path, required=True, help="the run file both arms are stored in (kept)")
    parser.add_argument("extra", nargs="*", help="more `rlab run` options, after --")
    args = parser.parse_args()
    if "--model" not in args.extra:
        ensure_tiny_model(get_scenario("calculator"), seed=args.seed)
    stamp = time.strftime("%H%M%S")
    out: dict = {"date": time.strftime("%Y-%m-%d"), "machine": describe_machine(), "budget_s": args.seconds,
                 "seed": args.seed, "extra": args.extra, "arms": {}}
    names = {}
    for arm in args.arms.split(","):
        names[arm] = f"calculator-{arm.replace('_', '-')}-{stamp}"
        cmd = [sys.executable, "-m", "rlab.engine.cli", "run", "--headless", "--scenario", "calculator",
               "--seed", str(args.seed), "--max-seconds", str(args.seconds), "--db", str(args.db),
               "--name", names[arm], *ARMS[arm], *args.extra]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        out["arms"][arm] = _arm(args.db, summary, args.target)
    if len(names) == 2:
        done = subprocess.run([sys.executable, "-m", "rlab.engine.cli", "compare", names["tools"], names["no_tools"],
                               "--from-step", "0", "--db", str(args.db), "--json"],
                              capture_output=True, text=True, check=True)
        compared = json.loads(done.stdout)
        out["compare"] = {k: compared[k] for k in ("comparable", "treatments", "pooled_a", "pooled_b", "interval")}
        out["compare"]["steps"] = len(compared["steps"])
    print(json.dumps(out))


def _arm(db: Path, summary: dict, target: float) -> dict:
    """One arm's figures from its summary line and its run file."""
    with StoreReader(db) as reader:
        rows = reader.step_metrics(summary["run_id"])
    evals = [r for r in rows if r.get("eval/pass_at_1") is not None]
    curve = [{"step": r["step"], "seconds": round(r.get("elapsed_seconds") or 0.0, 1),
              "pass_at_1": r["eval/pass_at_1"], "tool_use": r.get("eval/tools/use_rate")} for r in evals]
    reached = next((p for p in curve if p["pass_at_1"] >= target), None)
    trained = [r for r in rows if r.get("tools/use_rate") is not None]
    return {"run": summary["name"], "steps": summary["steps"], "seconds": summary["seconds"],
            "pass_at_1_initial": summary["eval_pass_at_1_initial"], "pass_at_1_final": summary["eval_pass_at_1_final"],
            "tool_use_initial": evals[0].get("eval/tools/use_rate") if evals else None,
            "tool_use_final": evals[-1].get("eval/tools/use_rate") if evals else None,
            "train_tool_use_first_step": trained[0]["tools/use_rate"] if trained else None,
            "train_tool_use_last_step": trained[-1]["tools/use_rate"] if trained else None,
            f"first_reached_{target}": reached, "curve": curve}


if __name__ == "__main__":
    main()
