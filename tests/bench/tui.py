"""TUI benchmark: time to first screen, key-press latency, memory over time.

    python tests/bench/tui.py [--trajectories 1000000] [--steps 10000]
                              [--completion-chars 300] [--db PATH]
                              [--presses 200] [--memory-seconds 180] [--engine-alerts]

Builds (or reuses, with ``--db``) a run file with the store benchmark's
builder (tests/bench/store.py: groups of 8, completions of
``--completion-chars`` characters of seeded random words), then
drives the real app headless with Textual's pilot at 120x40:

1. ``first_screen_s``: from ``rlab watch``'s checks of the file and its
   first read (``tui.launch.watch_app``, which builds ``RolloutLabApp``; modules
   already imported: ``import_s`` is measured apart, in a fresh interpreter)
   to the dashboard populated: header, recent groups, rollouts and the
   cursor's group shown and the plots drawn once.
2. key latency, with an engine streaming: a separate process appends a step
   of 8 groups every ``--stream-interval`` seconds to the same run while
   ``--presses`` cursor keys (``[ ] ← → ↑ ↓``, a fixed pseudo-random walk)
   are pressed; each sample is from the press to the new view shown on the
   screen and the app's message queue idle again (p50/p95/max, ms).
3. memory: RSS of this process (the TUI; the streaming writer runs apart)
   sampled while streaming for ``--memory-seconds``; prints the samples and
   a linear extrapolation of the growth to 60 minutes (it is an
   extrapolation from a shorter run, and says so).

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib.util
import json
import multiprocessing as mp
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import psutil  # noqa: E402

SIZE = (120, 40)
KEYS = ["left_square_bracket", "right_square_bracket", "left", "right", "up", "down"]


def bench_store():
    """tests/bench/store.py as a module (its name clashes with the store package)."""
    spec = importlib.util.spec_from_file_location("bench_store", ROOT / "tests/bench/store.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def import_seconds() -> float:
    """Seconds to import the app in a fresh interpreter (part of `rlab watch` start-up)."""
    code = "import time; t = time.perf_counter(); import tui.app; print(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)
    return float(out.stdout.strip())


def stream(path: str, run_id: int, first_step: int, interval: float, completion_chars: int,
           stop) -> None:
    """The streaming 'engine': a step of 8 groups of 8 every ``interval`` s."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    from rlab.store.writer import StoreWriter

    pool = bench_store().group_pool(completion_chars)
    step = first_step
    with StoreWriter(path) as writer:
        while not stop.is_set():
            started = time.perf_counter()
            writer.write_groups(run_id, step, [pool[(step * 8 + k) % len(pool)] for k in range(8)])
            writer.write_step(run_id, step, {"reward": 0.4 + 0.0001 * (step % 1000),
                                             "reward_std": 0.2, "kl": 0.01, "step_seconds": interval,
                                             "completions/mean_length": 75.0})
            step += 1
            time.sleep(max(0.0, interval - (time.perf_counter() - started)))


def percentiles(samples: list[float]) -> dict:
    samples = sorted(samples)
    pick = lambda q: samples[min(len(samples) - 1, int(q * len(samples)))]  # noqa: E731
    return {"n": len(samples), "p50_ms": round(pick(0.5) * 1e3, 1),
            "p95_ms": round(pick(0.95) * 1e3, 1), "max_ms": round(samples[-1] * 1e3, 1)}


async def wait_for(pilot, condition, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the app did not reach the expected state")
        await pilot.pause(0.002)


@contextlib.contextmanager
def gc_pauses():
    """The garbage collector's pauses while the block runs, ms by generation (a key whose
    frame waits for a full collection shows in the key p95)."""
    pauses: dict[int, list[float]] = {}
    started: list[float] = []

    def record(phase: str, info: dict) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            pauses.setdefault(info["generation"], []).append((time.perf_counter() - started.pop()) * 1e3)

    gc.callbacks.append(record)
    try:
        yield pauses
    finally:
        gc.callbacks.remove(record)


async def press_keys(app, presses: int, rng: random.Random) -> tuple[list[float], list[float]]:
    """Press cursor keys like a user (about 5 a second); per press, seconds
    from the key event to (a) the new view handed to the screen and (b) the
    next compositor refresh of the dashboard after it (the screen updated).

    Keys go in through ``App.simulate_key`` rather than ``Pilot.press``: the
    pilot waits for the process to be idle after each key, which under a
    streaming engine takes up to a second and is not part of the latency.
    """
    dashboard = app.screen_stack[1]
    refreshes: list[float] = []
    compositor_refresh = dashboard._compositor_refresh

    def timed_refresh() -> None:  # record when each frame is composed
        compositor_refresh()
        refreshes.append(time.perf_counter())

    dashboard._compositor_refresh = timed_refresh
    samples, to_view = [], []
    try:
        for i in range(presses):
            key = KEYS[0] if i % 3 == 0 else rng.choice(KEYS)  # mostly walk back: cache misses
            before = app.view
            t0 = time.perf_counter()
            app.simulate_key(key)
            while app.view is before:
                if time.perf_counter() - t0 > 30:
                    raise TimeoutError(f"no new view after {key}")
                await asyncio.sleep(0.001)
            t_view = time.perf_counter()
            while not refreshes or refreshes[-1] < t_view:
                await asyncio.sleep(0.001)
            to_view.append(t_view - t0)
            samples.append(next(t for t in refreshes if t >= t_view) - t0)
            await asyncio.sleep(0.2)
    finally:
        del dashboard._compositor_refresh
    return samples, to_view


async def drive(path: Path, run_id: int, args, stop_stream) -> dict:
    from textual.widgets import DataTable

    from rlab.tui.launch import watch_app

    rss = psutil.Process().memory_info
    out: dict = {"rss_mb_before_app": round(rss().rss / 2**20, 1)}
    started = time.perf_counter()
    app = watch_app(path, str(run_id))
    async with app.run_test(size=SIZE) as pilot:
        def populated() -> bool:
            if app.view is None or app.view.group is None or len(app.screen_stack) < 2:
                return False
            dash = app.screen_stack[1]
            return (dash.query_one("#groups", DataTable).row_count > 0
                    and dash.query_one("#rollouts", DataTable).row_count > 0
                    and not dash._plots_dirty)

        await wait_for(pilot, populated)
        await pilot.pause()
        out["first_screen_s"] = round(time.perf_counter() - started, 3)
        out["steps_at_start"] = app.feed.last_step + 1

        stop_stream.clear()
        writer = mp.get_context("spawn").Process(
            target=stream, args=(str(path), run_id, app.feed.last_step + 1, args.stream_interval,
                                 args.completion_chars, stop_stream), daemon=True)
        if args.stream_interval > 0:
            writer.start()
        try:
            rng = random.Random(0)
            with gc_pauses() as pauses:
                samples, to_view = await press_keys(app, args.presses, rng)
            out["key_latency"] = percentiles(samples)
            out["gc_pauses_during_keys"] = {f"gen{gen}": {"n": len(ms), "max_ms": round(max(ms, default=0.0), 1)}
                                            for gen, ms in sorted(pauses.items())}
            out["key_to_view_loaded"] = percentiles(to_view)
            out["steps_streamed_during_keys"] = app.feed.last_step + 1 - out["steps_at_start"]

            memory, t_start = [], time.perf_counter()
            next_sample = 0.0
            while (elapsed := time.perf_counter() - t_start) < args.memory_seconds:
                if elapsed >= next_sample:
                    memory.append({"t_s": round(elapsed), "rss_mb": round(rss().rss / 2**20, 1),
                                   "steps": app.feed.last_step + 1})
                    next_sample += args.memory_seconds / 6
                await pilot.press(rng.choice(KEYS))
                await pilot.pause(0.5)
            memory.append({"t_s": round(time.perf_counter() - t_start),
                           "rss_mb": round(rss().rss / 2**20, 1), "steps": app.feed.last_step + 1})
        finally:
            stop_stream.set()
            if writer.is_alive():
                writer.join(10)
    out["memory"] = memory
    out["memory_extrapolation"] = extrapolate(memory)
    return out


def extrapolate(memory: list[dict]) -> dict:
    """Linear RSS growth over the second half of the samples, projected to 5 and 60 min."""
    half = memory[len(memory) // 2:]
    (t0, m0), (t1, m1) = (half[0]["t_s"], half[0]["rss_mb"]), (half[-1]["t_s"], half[-1]["rss_mb"])
    slope = (m1 - m0) / (t1 - t0) if t1 > t0 else 0.0
    return {"mb_per_min": round(slope * 60, 2),
            "rss_mb_at_5_min": round(m1 + slope * (300 - t1), 1),
            "rss_mb_at_60_min": round(m1 + slope * (3600 - t1), 1),
            "note": f"extrapolated linearly from a {t1}-second streaming run, not measured"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--completion-chars", type=int, default=300,
                        help="characters of each completion (8000: long reasoning)")
    parser.add_argument("--db", type=Path, help="reuse this run file if it exists (else build it there)")
    parser.add_argument("--presses", type=int, default=200)
    parser.add_argument("--memory-seconds", type=float, default=180)
    parser.add_argument("--stream-interval", type=float, default=0.1,
                        help="seconds between streamed steps (0.1: 10 steps/s, 80 groups/s; "
                             "0: no streaming)")
    parser.add_argument("--engine-alerts", action="store_true",
                        help="mark the run as one whose alerts our engine raised (config alerts_by), as a run "
                             "of `rlab run` is: the TUI shows them instead of replaying the watch over every "
                             "streamed step, as it does for a run imported from another tool (the default)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.db or Path(tmp) / "bench.db"
        result: dict = {}
        if not path.exists():
            built = bench_store().build(path, args.trajectories, args.steps, args.completion_chars)
            result["build_s"] = round(built["seconds"], 1)
        from rlab.store.reader import StoreReader

        if args.engine_alerts:
            from rlab.store.db import write_transaction
            from rlab.store.writer import StoreWriter

            with StoreWriter(path) as writer, write_transaction(writer.database):
                writer.database.execute("UPDATE runs SET config = json_set(config, '$.alerts_by', 'engine') "
                                        "WHERE name = 'bench'")
        result["alerts"] = "engine" if args.engine_alerts else "replayed by the TUI"
        with StoreReader(path) as reader:
            run = reader.run_by_name("bench")
            run_id = run["id"]
            result["trajectories"] = reader.rollouts_since(run_id, 0, 1)[-1]["id"]
        result["import_s"] = round(import_seconds(), 3)
        stop = mp.get_context("spawn").Event()
        result.update(asyncio.run(drive(path, run_id, args, stop)))
        result["cpus"] = os.cpu_count()
        result["load_average_1min"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
