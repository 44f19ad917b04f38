"""Seconds from ``rlab run`` to the first trained step, for every built-in scenario, on an empty cache.

    python tests/bench/first_step.py [--scenarios NAME ...] [--limit 60]

Each scenario runs ``rlab run --headless --scenario NAME`` in a fresh
folder with ``RLAB_CACHE_DIR`` and ``XDG_CACHE_HOME`` pointing at an empty
directory, as a newcomer's first run would (issue 33: a first run must not
build its policy for minutes). The clock runs from the launch to the moment
the run file holds step 1 (the start-of-run held-out eval is included; it
comes before step 1), polled every 0.1 s; then the run is stopped with
SIGTERM. No ``--max-steps 1``: that would make step 1 the last step and add
the end-of-run eval, which a newcomer's step 1 does not wait for. Scenarios
run one after the other, never at once. Prints one JSON object: seconds per
scenario, the slowest, and whether every one is within ``--limit``.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# tests/bench/store.py and tui.py would shadow the packages of the same name.
ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from rlab.scenarios import builtin_scenarios  # noqa: E402


def _has_step_one(db: Path) -> bool:
    if not db.exists():
        return False
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.1) as conn:
            return conn.execute("SELECT 1 FROM steps WHERE step >= 1 LIMIT 1").fetchone() is not None
    except sqlite3.Error:  # the file or its tables are still being created
        return False


def _stop(proc: subprocess.Popen) -> None:
    """Stop a run as a user's Ctrl-C would (SIGTERM), and kill it if it lingers."""
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def seconds_to_first_step(name: str, limit: float) -> float | None:
    """Seconds until scenario ``name``'s run file holds step 1; None past ``3 * limit``.

    Raises:
        RuntimeError: the run ended without a step 1 (its stderr's tail in the message).
    """
    with tempfile.TemporaryDirectory() as tmp:
        folder, cache = Path(tmp), Path(tmp) / "cache"
        cache.mkdir()
        db = folder / "first.db"
        env = {**os.environ, "RLAB_CACHE_DIR": str(cache), "XDG_CACHE_HOME": str(cache)}
        cmd = [sys.executable, "-P", "-m", "rlab.engine.cli", "run", "--headless", "--scenario", name,
               "--db", str(db)]
        t0 = time.perf_counter()
        with subprocess.Popen(cmd, cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True) as proc:
            while time.perf_counter() - t0 < 3 * limit:
                if _has_step_one(db):
                    elapsed = time.perf_counter() - t0
                    _stop(proc)
                    return round(elapsed, 2)
                if proc.poll() is not None:
                    if _has_step_one(db):
                        return round(time.perf_counter() - t0, 2)
                    raise RuntimeError(f"{name}: the run ended without a step: {proc.stderr.read()[-1500:]}")
                time.sleep(0.1)
            proc.kill()
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="+", default=list(builtin_scenarios()))
    parser.add_argument("--limit", type=float, default=60.0, help="the target, seconds (issue 33: 60)")
    args = parser.parse_args()
    seconds: dict[str, float | None] = {}
    errors: dict[str, str] = {}
    for name in args.scenarios:
        try:
            seconds[name] = seconds_to_first_step(name, args.limit)
        except RuntimeError as err:  # one scenario's failure is a finding, not the end of the bench
            seconds[name], errors[name] = None, str(err)
    known = [s for s in seconds.values() if s is not None]
    print(json.dumps({"bench": "first-step", "cpus": os.cpu_count(), "limit_s": args.limit,
                      "seconds_to_step_1": seconds, "errors": errors, "slowest_s": max(known) if known else None,
                      "all_within_limit": all(s is not None and s <= args.limit for s in seconds.values())},
                     indent=1))


if __name__ == "__main__":
    main()
