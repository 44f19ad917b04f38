"""How long a fork takes to its first step, beside a resume of the same run (issue 38: within one second).

    python tests/bench/fork_start.py [--repeats 3] [--scenario arithmetic]

Trains a run of ``--steps`` steps with a checkpoint every ``--checkpoint-every``,
then, alternating so the machine's noise hits both alike, times from the
command's launch until the run file holds its first new step:

- ``rlab run --headless --resume RUN --max-steps K+1`` (K: the run's newest
  checkpoint; each resume trains one step and checkpoints it, so the next
  resumes from there);
- ``rlab fork RUN@C --name F --headless --max-steps C+1`` from a fixed
  checkpoint C (a new fork each time).

Both start a process, build the policy, load a checkpoint, run the held-out
eval of the starting policy and train one step. Prints one JSON object: each
command's seconds per repeat, their medians, fork minus resume, and the machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlab.engine.policy.device import describe_machine
from rlab.store.reader import StoreReader


def _rlab(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-P", "-m", "rlab.engine.cli", *args], cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _until_step(db: Path, name: str, step: int, proc: subprocess.Popen, started: float) -> float:
    """Seconds from ``started`` until run ``name`` stored ``step`` (polling the file every 20 ms)."""
    while True:
        with StoreReader(db) as reader:
            run = reader.run_by_name(name)
            if run is not None and step in reader.steps(run["id"]):
                return time.perf_counter() - started
        if proc.poll() is not None and proc.returncode != 0:
            raise SystemExit(f"{name} failed: {proc.stderr.read() if proc.stderr else ''}")
        time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scenario", default="arithmetic")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--checkpoint-every", type=int, default=10)
    args = parser.parse_args()
    machine = describe_machine()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        db = folder / "fork.db"
        first = _rlab("run", "--headless", "--db", str(db), "--name", "base", "--scenario", args.scenario,
                      "--max-steps", str(args.steps), "--checkpoint-every", str(args.checkpoint_every), cwd=folder)
        if first.wait() != 0:
            raise SystemExit(f"the run to fork failed: {first.stderr.read() if first.stderr else ''}")
        seconds: dict[str, list[float]] = {"resume": [], "fork": []}
        for k in range(args.repeats):
            with StoreReader(db) as reader:
                latest = reader.checkpoints(reader.run_by_name("base")["id"])[-1]["step"]
            started = time.perf_counter()
            proc = _rlab("run", "--headless", "--resume", "base", "--db", str(db), "--max-steps", str(latest + 1),
                         cwd=folder)
            seconds["resume"].append(round(_until_step(db, "base", latest + 1, proc, started), 2))
            proc.wait()
            started = time.perf_counter()
            proc = _rlab("fork", f"base@{args.checkpoint_every}", "--name", f"f{k}", "--db", str(db), "--headless",
                         "--max-steps", str(args.checkpoint_every + 1), cwd=folder)
            seconds["fork"].append(round(_until_step(db, f"f{k}", args.checkpoint_every + 1, proc, started), 2))
            proc.wait()
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    print(json.dumps({"scenario": args.scenario, "seconds_to_first_step": seconds, "median": medians,
                      "fork_minus_resume_s": round(medians["fork"] - medians["resume"], 2),
                      "machine_at_start": machine, "load_average_at_end": describe_machine()["load_average"]}))


if __name__ == "__main__":
    main()
