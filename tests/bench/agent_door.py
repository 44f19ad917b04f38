"""Same learning through the door (issue 56): the shop agent trained natively and as a user's rollout.

    python tests/bench/agent_door.py --dir /tmp/door [--max-steps 40 --eval-every 10 --seed 1] [-- MORE RUN OPTIONS]

Trains examples/tasks/shop_agent (the engine's tool loop over ``tools.py``:
arm ``native``) and examples/agents/shop_agent (``rollout.py``, its own loop
and tools, through the endpoint the engine serves: arm ``agent``) headless,
one after the other, each in its own run file (``DIR/native.db``,
``DIR/agent.db``), at the same steps, seed, prompts per step and group size,
with no alert pausing them (``--alert pause_on=``: a held-out dip raises
``collapse``, which would otherwise wait for a resume).
Both tasks name the same tiny policy (its cache key: the task's name, tools
file, transcripts and system prompt), built first if it is not cached (not
counted). Prints one JSON object: per arm the held-out greedy pass@1 curve
(with tool use), the final figures, seconds, the mean ``sampling/*`` figures,
and for the agent arm the endpoint's figures (``endpoint/batch_width``,
``endpoint/tokens_per_s``, ``endpoint/requests``, ``endpoint/queue_wait_s``,
``agent/errors`` per step and in all); then the differences between the arms
at the steps both evaluated (final, mean and largest), and whether the final
one is within ``--tolerance`` (the issue's 0.05).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from rlab.engine.policy.device import describe_machine  # noqa: E402
from rlab.engine.train.warm_start import ensure_tiny_model  # noqa: E402
from rlab.scenarios.task_file import load_task  # noqa: E402
from rlab.store.reader import StoreReader  # noqa: E402

ARMS = {"native": ROOT / "examples" / "tasks" / "shop_agent", "agent": ROOT / "examples" / "agents" / "shop_agent"}
ENDPOINT = ("endpoint/requests", "endpoint/batch_width", "endpoint/queue_wait_s", "endpoint/tokens_per_s",
            "agent/errors")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, required=True, help="folder of the two run files (kept)")
    parser.add_argument("--max-steps", type=int, default=40)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--prompts-per-step", type=int, default=32)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--arms", default="native,agent", help="comma-separated: native, agent")
    parser.add_argument("extra", nargs="*", help="more `rlab run` options for both arms, after --")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    built = time.monotonic()
    model = ensure_tiny_model(load_task(ARMS["native"]), seed=args.seed) if "--model" not in args.extra else None
    out: dict = {"date": time.strftime("%Y-%m-%d"), "machine": describe_machine(), "seed": args.seed,
                 "max_steps": args.max_steps, "eval_every": args.eval_every,
                 "prompts_per_step": args.prompts_per_step, "group_size": args.group_size, "extra": args.extra,
                 "tiny_policy": None if model is None else {"dir": str(model),
                                                            "seconds_to_ready": round(time.monotonic() - built, 1)},
                 "arms": {}}
    for arm in args.arms.split(","):
        db = args.dir / f"{arm}.db"
        name = f"shop-{arm}-s{args.seed}-{time.strftime('%H%M%S')}"
        cmd = [sys.executable, "-m", "rlab.engine.cli", "run", "--headless", "--task", str(ARMS[arm]),
               "--seed", str(args.seed), "--max-steps", str(args.max_steps), "--eval-every", str(args.eval_every),
               "--prompts-per-step", str(args.prompts_per_step), "--group-size", str(args.group_size),
               "--db", str(db), "--name", name, "--alert", "pause_on=", *args.extra]
        start = time.monotonic()
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{arm} arm failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-3000:]}")
        summary = json.loads(done.stdout.strip().splitlines()[-1])
        out["arms"][arm] = {"task": str(ARMS[arm].relative_to(ROOT)), "db": str(db),
                            "wall_seconds": round(time.monotonic() - start, 1),
                            **_arm(db, summary, agent=arm == "agent")}
    if {"native", "agent"} <= out["arms"].keys():
        out["difference"] = _difference(out["arms"]["native"]["curve"], out["arms"]["agent"]["curve"], args.tolerance)
    print(json.dumps(out))


def _arm(db: Path, summary: dict, *, agent: bool) -> dict:
    """One arm's figures from its summary line and its run file."""
    with StoreReader(db) as reader:
        rows = reader.step_metrics(summary["run_id"])
    evals = [r for r in rows if r.get("eval/pass_at_1") is not None]
    curve = [{"step": r["step"], "pass_at_1": r["eval/pass_at_1"], "tool_use": r.get("eval/tools/use_rate")}
             for r in evals]
    trained = [r for r in rows if r.get("reward") is not None]
    sampling = sorted({k for r in trained for k in r if k.startswith("sampling/")})
    arm = {"run": summary["name"], "steps": summary["steps"], "seconds": summary["seconds"],
           "pass_at_1_initial": summary["eval_pass_at_1_initial"], "pass_at_1_final": summary["eval_pass_at_1_final"],
           "curve": curve,
           "train": [{"step": r["step"], "reward": r.get("reward"), "success_rate": r.get("success_rate"),
                      "tool_use": r.get("tools/use_rate"), "tool_calls_mean": r.get("tools/calls_mean"),
                      "tool_error_share": r.get("tools/error_share")} for r in trained],
           "sampling_mean": {k: _mean([r.get(k) for r in trained], digits=None) for k in sampling}}
    if agent:
        arm["endpoint_per_step"] = [{"step": r["step"], **{k: r.get(k) for k in ENDPOINT}} for r in trained]
        arm["endpoint_mean"] = {k: _mean([r.get(k) for r in trained]) for k in ENDPOINT}
        arm["agent_errors_total"] = sum(r.get("agent/errors") or 0.0 for r in trained)
        arm["agent_error_kinds"] = {k: sum(r.get(k) or 0.0 for r in trained)
                                    for k in sorted({k for r in trained for k in r if k.startswith("agent/errors/")})}
    return arm


def _difference(native: list[dict], agent: list[dict], tolerance: float) -> dict:
    """agent - native held-out pass@1 at the steps both evaluated."""
    a = {p["step"]: p["pass_at_1"] for p in agent}
    pairs = [(p["step"], a[p["step"]] - p["pass_at_1"]) for p in native if p["step"] in a]
    if not pairs:
        return {"steps": []}
    final = pairs[-1][1]
    return {"steps": [s for s, _ in pairs], "agent_minus_native": [round(d, 4) for _, d in pairs],
            "final": round(final, 4), "mean": round(statistics.fmean(d for _, d in pairs), 4),
            "largest": round(max((d for _, d in pairs), key=abs), 4), "tolerance": tolerance,
            "final_within_tolerance": abs(final) <= tolerance}


def _mean(values: list, digits: int | None = 4) -> float | None:
    kept = [float(v) for v in values if v is not None]
    if not kept:
        return None
    return statistics.fmean(kept) if digits is None else round(statistics.fmean(kept), digits)


if __name__ == "__main__":
    main()
