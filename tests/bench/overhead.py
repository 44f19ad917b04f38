"""Store overhead benchmark: training steps with the writer streaming vs disabled.

    python tests/bench/overhead.py [--steps 60]

Two sessions of the default job in one process, same seed, one with the
store writing every group and step, one with ``StoreWriter(enabled=False)``;
their steps alternate (A, B, A, B, ...) so machine noise hits both alike.
Prints JSON: median and mean wall seconds per step for each, and the
overhead ratio (streaming / disabled - 1).
"""

from __future__ import annotations

import argparse
import json
import sys
import statistics
import tempfile
import time
from pathlib import Path

# tests/bench/store.py and tui.py would shadow the packages of the same name.
ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from rlab.engine.run.config import RunConfig  # noqa: E402
from rlab.engine.run.session import start  # noqa: E402
from rlab.engine.step import train_step  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sessions = {
            label: start(RunConfig(db=Path(tmp) / f"{label}.db", store=enabled, name=label))
            for label, enabled in (("streaming", True), ("disabled", False))
        }
        times: dict[str, list[float]] = {label: [] for label in sessions}
        for step in range(1, args.steps + 1):
            for label, session in sessions.items():
                t0 = time.perf_counter()
                session.recorder.record(train_step(session, step))
                times[label].append(time.perf_counter() - t0)
        for session in sessions.values():
            session.close()
    med = {label: statistics.median(ts) for label, ts in times.items()}
    mean = {label: statistics.fmean(ts) for label, ts in times.items()}
    print(json.dumps({
        "steps": args.steps,
        "median_step_s": med, "mean_step_s": mean,
        "overhead_median": med["streaming"] / med["disabled"] - 1,
        "overhead_mean": mean["streaming"] / mean["disabled"] - 1,
    }))


if __name__ == "__main__":
    main()
