"""Learning-curve benchmark: the headless default job for a wall-clock budget.

    python tests/bench/learning_curve.py --seconds 180 [--scenario arithmetic] [--seed 0]

Builds (or reuses) the tiny policy first, so its build time is not counted,
then runs ``rlab run --headless --max-seconds S`` as its own process and
prints one JSON object: held-out greedy pass@1 before and after, steps,
training seconds, the eval curve (step, seconds since start, pass@1) read
back from the run file, and the first time pass@1 reached 0.9.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# tests/bench/store.py and tui.py would shadow the packages of the same name.
ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from rlab.engine.train.warm_start import ensure_tiny_model  # noqa: E402
from rlab.scenarios import get_scenario  # noqa: E402
from rlab.store.reader import StoreReader  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--scenario", default="arithmetic")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("extra", nargs="*", help="more `rlab run` options, after --")
    args = parser.parse_args()

    t0 = time.perf_counter()
    ensure_tiny_model(get_scenario(args.scenario), seed=args.seed)
    build_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "curve.db"
        cmd = [sys.executable, "-m", "rlab.engine.cli", "run", "--headless", "--scenario", args.scenario,
               "--seed", str(args.seed), "--max-seconds", str(args.seconds), "--db", str(db), *args.extra]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=tmp)
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        curve = _curve(StoreReader(db), summary["run_id"])
    reached = next((point for point in curve if point["pass_at_1"] >= args.target), None)
    print(json.dumps({
        "scenario": args.scenario, "seed": args.seed, "budget_s": args.seconds,
        "tiny_model_build_s": round(build_s, 1),
        "eval_pass_at_1_initial": summary["eval_pass_at_1_initial"],
        "eval_pass_at_1_final": summary["eval_pass_at_1_final"],
        "steps": summary["steps"], "seconds": summary["seconds"],
        "seconds_per_step": round(summary["seconds"] / max(summary["steps"], 1), 3),
        f"first_reached_{args.target}": reached, "curve": curve,
    }))


def _curve(reader: StoreReader, run_id: int) -> list[dict]:
    """(step, wall seconds since training started, pass@1) at every held-out eval."""
    return [
        {"step": row["step"], "seconds": round(row.get("elapsed_seconds") or 0.0, 1),
         "pass_at_1": row["eval/pass_at_1"]}
        for row in reader.step_metrics(run_id) if row.get("eval/pass_at_1") is not None
    ]


if __name__ == "__main__":
    main()
