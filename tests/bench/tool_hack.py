"""A tool-specific reward hack, caught and A/B'd (issue 45): a reward that pays for every call.

    python tests/bench/tool_hack.py --db /tmp/hack.db [--steps 40] [--task examples/tasks/shop_agent]

Trains the calculator scenario (or ``--task``) with its pay-per-call rubric
(``rewards_pay_per_call.py`` beside its ``rewards.py``) for ``--steps`` steps,
checkpointing and evaluating every 5; finds the first ``tool_paid``,
``tool_loop`` or ``hack`` alert the engine raised; forks the run at the
checkpoint at or before it (step 0: the run's start) with the honest ``rewards.py`` for the steps left, so both branches
end at the same step; and prints one JSON object: the alerts (step, kind,
message), the fork step, and ``rlab compare HACK FIXED``'s verdict at the
matched steps (held-out pass@1 of each, pooled difference and interval),
with each branch's last training tool metrics.
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
from rlab.store.reader import StoreReader  # noqa: E402

EVERY = 5


def rlab(*args: str) -> str:
    """Run ``rlab ARGS`` to its end; its stdout."""
    return subprocess.run([sys.executable, "-m", "rlab.engine.cli", *args], capture_output=True, text=True,
                          check=True).stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--task", type=Path, help="a tool task folder instead of the calculator scenario")
    parser.add_argument("extra", nargs="*", help="more `rlab run` options, after --")
    args = parser.parse_args()
    folder = args.task or ROOT / "scenarios" / "calculator"
    what = ["--task", str(args.task)] if args.task else ["--scenario", "calculator"]
    stamp = time.strftime("%H%M%S")
    hack, fixed = f"hack-{stamp}", f"fixed-{stamp}"
    rlab("run", "--headless", *what, "--db", str(args.db), "--name", hack, "--max-steps", str(args.steps),
         "--rewards", str(folder / "rewards_pay_per_call.py"), "--checkpoint-every", str(EVERY),
         "--keep-checkpoints", "0", "--eval-every", str(EVERY), "--alert", "pause_on=", *args.extra)
    with StoreReader(args.db) as reader:
        run_id = reader.run_by_name(hack)["id"]
        alerts = [{"step": e["step"], "kind": e["payload"]["alert"], "message": e["payload"]["message"]}
                  for e in reader.events(run_id) if e["kind"] == "alert"]
    caught = [a for a in alerts if a["kind"] in ("tool_paid", "tool_loop", "hack")]
    out = {"date": time.strftime("%Y-%m-%d"), "machine": describe_machine(), "what": what, "steps": args.steps,
           "alerts": alerts}
    if caught:
        fork_step = caught[0]["step"] // EVERY * EVERY
        rlab("fork", f"{hack}@{fork_step}", "--headless", "--db", str(args.db), "--name", fixed,
             "--rewards", str(folder / "rewards.py"), "--max-steps", str(args.steps - fork_step))
        compared = json.loads(rlab("compare", hack, fixed, "--db", str(args.db), "--json"))
        out |= {"fork_step": fork_step, "compare": {k: compared[k] for k in (
            "comparable", "steps", "pooled_a", "pooled_b", "interval")}, "last_step": {
            name: _last_tools(args.db, name) for name in (hack, fixed)}}
    print(json.dumps(out))


def _last_tools(db: Path, name: str) -> dict:
    """A branch's last step's reward, success and tool metrics."""
    with StoreReader(db) as reader:
        last = reader.step_metrics(reader.run_by_name(name)["id"])[-1]
    keys = ("step", "reward", "success_rate", "tools/calls_mean", "tools/loop_share", "turns/mean")
    return {k: last.get(k) for k in keys}


if __name__ == "__main__":
    main()
