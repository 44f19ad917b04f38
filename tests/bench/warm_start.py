"""A real model's warm start, A/B'd: the same run with it and with ``--no-warm-start`` (issue 57).

    python tests/bench/warm_start.py --db /tmp/warm.db --steps 2 \\
        -- --scenario calculator --model smollm2-135m --eval-every 2 --eval-size 32
    python tests/bench/warm_start.py --db /tmp/warm.db --steps 6 --arms warm \\
        -- --task examples/tasks/shop_agent --model smollm2-135m --eval-every 3

Each arm is one ``rlab run --headless --seed SEED --max-steps STEPS`` (the
options after ``--`` added; equal steps, so both arms evaluate at the same
steps and ``rlab compare`` pairs them), from an empty cache of its own (``RLAB_CACHE_DIR``
in a fresh temporary folder, so the model's conversion and the warm start are
paid as a newcomer pays them), one after the other, into one run file. Prints
one JSON object: the machine; per arm the command's wall seconds, the warm
start as the manifest records it, the held-out curve with each eval's seconds
from the command's start to its ``eval`` event (``wall_s``; the final eval,
which has none, to the run's last heartbeat), the first eval with
pass@1 >= ``--target`` and tool use >= ``--tool-use``, the run's
``sampling/*`` figures against the ``sampler_mismatch`` alert's threshold,
and ``rlab compare COLD WARM``'s verdict (the warm start is the treatment).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from rlab.engine.alerts.thresholds import AlertThresholds  # noqa: E402
from rlab.engine.policy.device import describe_machine  # noqa: E402
from rlab.store.reader import StoreReader  # noqa: E402

ARMS = {"warm": [], "cold": ["--no-warm-start"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="each run's --max-steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", type=float, default=0.8, help="held-out pass@1 to reach")
    parser.add_argument("--tool-use", type=float, default=0.9, help="held-out tool use to reach with it")
    parser.add_argument("--arms", default="warm,cold", help="comma-separated: warm, cold")
    parser.add_argument("--db", type=Path, required=True, help="the run file the arms are stored in (kept)")
    parser.add_argument("extra", nargs="*", help="the `rlab run` options (task, model, ...), after --")
    args = parser.parse_args()
    out: dict = {"date": time.strftime("%Y-%m-%d"), "machine": describe_machine(), "steps": args.steps,
                 "seed": args.seed, "extra": args.extra, "arms": {}}
    stamp = time.strftime("%H%M%S")
    names = {}
    for arm in args.arms.split(","):
        names[arm] = f"{arm}-{stamp}"
        cmd = [sys.executable, "-m", "rlab.engine.cli", "run", "--headless", "--seed", str(args.seed),
               "--max-steps", str(args.steps), "--db", str(args.db), "--name", names[arm], *ARMS[arm], *args.extra]
        with tempfile.TemporaryDirectory() as cache:
            started = time.time()
            done = subprocess.run(cmd, capture_output=True, text=True, env=os.environ | {"RLAB_CACHE_DIR": cache})
            wall = time.time() - started
        if done.returncode != 0:
            sys.exit(f"arm {arm} failed ({done.returncode}):\n{done.stderr[-3000:]}")
        out["arms"][arm] = _arm(args.db, names[arm], started, wall, args.target, args.tool_use)
    if len(names) == 2:
        done = subprocess.run([sys.executable, "-m", "rlab.engine.cli", "compare", names["cold"], names["warm"],
                               "--db", str(args.db), "--json"], capture_output=True, text=True)
        if done.returncode != 0:  # the arms' figures above still print
            out["compare"] = {"error": done.stderr.strip()}
        else:
            compared = json.loads(done.stdout)
            out["compare"] = {k: compared.get(k) for k in ("comparable", "treatments", "steps", "pooled_a",
                                                          "pooled_b", "interval")}
    print(json.dumps(out))


def _arm(db: Path, name: str, started: float, wall: float, target: float, tool_use: float) -> dict:
    """One arm's figures from its run file."""
    with StoreReader(db) as reader:
        run = reader.run_by_name(name)
        rows = reader.step_metrics(run["id"])
        done = {e["step"]: e["created_at"] for e in reader.events(run["id"]) if e["kind"] == "eval"}
    offset = run["created_at"] - started  # the model's load and the warm start, before the run's clock
    evals = [{"step": r["step"], "wall_s": round(done.get(r["step"], run["heartbeat_at"]) - started, 1),
              "pass_at_1": r["eval/pass_at_1"], "tool_use": r.get("eval/tools/use_rate")}
             for r in rows if r.get("eval/pass_at_1") is not None]
    reached = next((e for e in evals if e["pass_at_1"] >= target and (e["tool_use"] or 0) >= tool_use), None)
    diff = [r["sampling/sampling_logp_difference/mean"] for r in rows
            if r.get("sampling/sampling_logp_difference/mean") is not None]
    threshold = AlertThresholds().sampler_mismatch
    return {"run": name, "wall_s": round(wall, 1), "before_run_s": round(offset, 1), "last_step": rows[-1]["step"] if rows else 0,
            "warm_start": run["manifest"].get("warm_start"), "curve": evals, "reached": reached,
            "sampling_logp_difference_mean": {"mean": sum(diff) / len(diff) if diff else math.nan,
                                              "max": max(diff, default=math.nan), "alert_threshold": threshold}}


if __name__ == "__main__":
    main()
