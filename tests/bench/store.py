"""Store benchmark: ingest rate and TUI query latency on a large run file.

    python tests/bench/store.py [--trajectories 1000000] [--steps 10000]
                                [--completion-chars 300] [--db PATH] [--text-index]

Builds a run file in a temporary directory through StoreWriter (groups of 8,
completions of ``--completion-chars`` characters of seeded random words,
messages JSON included, one group in 16 a 4-turn episode; one transaction
per step), then times every StoreReader query the TUI polls. A run file of
long reasoning completions, 200,000 trajectories of 8,000 characters
(3.2 GB), is ``--trajectories 200000 --steps 2000 --completion-chars 8000``;
``--db PATH`` keeps the file there, or reuses it if it exists (no ingest
figures then), so tests/bench/tui.py can read the same file.
``--text-index`` writes into a file with the text index (``rlab index``,
store/textindex.py) from the start, or builds it on the reused file: the
same command with and without it measures what the index costs (ingest,
file size, ``text_index_build_s``) and what it gives (the searches).

Prints one JSON object: ingest rates (trajectories per second, per-step and
per-group transactions) and p50/p95/max latency in milliseconds per query
(``n`` timings each: ``--repeats``, at most 20 of a search); the searches
are the TUI's (``/``: newest first within ``store.search.SEARCH_BUDGET_S``),
each with the matches its last run found and whether it read every
trajectory of the run; ``text_index``: whether the file had the index.
Targets (issue 47): every search <= 0.5 s p95 at any size.
Targets (issue 3): ingest >= 20,000 trajectories/s; every TUI query p95 <
20 ms at 1,000,000 trajectories.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from rlab.store.export import export_run  # noqa: E402
from rlab.store.reader import StoreReader  # noqa: E402
from rlab.store.search import SEARCH_BUDGET_S, Found  # noqa: E402
from rlab.store.textindex import build_text_index  # noqa: E402
from rlab.store.writer import StoreWriter  # noqa: E402
from test_store_helpers import make_group  # noqa: E402

GROUP_SIZE = 8
POOL_GROUPS = 64
# The frequent words of a reasoning completion, most frequent first.
COMMON_WORDS = """
the a to is of and so we that it this in be for then not with as are answer
number sum step first next each add carry digit total check result two one
three ten value hence let us get which from by at or but if than more less four
five six seven eight nine zero tens ones place column write left right equal
equals gives makes wait again means now all only both same last since because
hundred twenty thirty forty fifty sixty seventy eighty ninety eleven twelve
correct wrong careful simple problem question given need find know see look
part start end line into out up down there here what when how why would could
should must can will do does did done have has had make made take took try
times plus minus over under between after before while until once twice
every other another way case idea work working think thinking compute remainder
""".split()


def vocabulary(size: int = 8192) -> list[str]:
    """COMMON_WORDS, then seeded pseudo-words of 2-4 syllables up to ``size``
    words: the rare words of a long text. Drawn with Zipf weights, most words
    (and the trigrams inside them) are in few completions, as in real text,
    so compression and a text index see realistic text."""
    rng = random.Random(1)
    syllables = [c + v for c in ("b", "c", "d", "f", "g", "h", "k", "l", "m", "n", "p", "r", "s", "t",
                                 "v", "w", "x", "z", "th", "ch", "sh", "st", "pr", "tr") for v in "aeiouy"]
    words = list(COMMON_WORDS)
    seen = set(words)
    while len(words) < size:
        word = "".join(rng.choices(syllables, k=rng.randint(2, 4))) + rng.choice(("", "", "n", "s", "r", "t"))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


VOCABULARY = vocabulary()
ZIPF = list(itertools.accumulate(1 / rank for rank in range(1, len(VOCABULARY) + 1)))
"""Cumulative Zipf weights of VOCABULARY (rank r drawn with weight 1/r)."""
# The queries issue 3 names, with its p95 < 20 ms target at 1M trajectories
# (the reward series as a plot reads it: 10,000 steps averaged to 500 points;
# metric_series_reward_all, every point, is reported next to it).
REQUIRED = ("latest_step", "metric_series_reward_500_points", "groups_of_step",
            "trajectory_with_turns", "rollouts_since")


FREQUENT_ABSENT = "the the to so"
"""Text no completion holds, made of trigrams nearly every completion holds
(of COMMON_WORDS' most frequent words): a search the text index cannot narrow."""


def completion_text(rng: random.Random, chars: int) -> str:
    """``chars`` characters of reasoning-like text: words of VOCABULARY drawn
    with Zipf weights, a number in every ten words, sentences of 6-20 words."""
    parts: list[str] = []
    length = 0
    while length < chars:
        words = [str(rng.randrange(1000)) if rng.random() < 0.1 else word
                 for word in rng.choices(VOCABULARY, cum_weights=ZIPF, k=rng.randint(6, 20))]
        sentence = " ".join(words).capitalize() + (".\n" if rng.random() < 0.2 else ". ")
        parts.append(sentence)
        length += len(sentence)
    return "".join(parts)[:chars]


def group_pool(completion_chars: int = 300) -> list:
    """POOL_GROUPS distinct groups to cycle through (building records is the
    engine's cost, not the store's), every completion its own seeded random
    text; every 16th group is a multi-step group with turns."""
    rng = random.Random(0)
    texts = [[completion_text(rng, completion_chars) for _ in range(GROUP_SIZE)]
             for _ in range(POOL_GROUPS)]
    return [make_group(i, size=GROUP_SIZE, turns=4 if i % 16 == 0 else 0,
                       reward_of=lambda j, i=i: float((i + j) % 3 == 0),
                       completion_of=texts[i].__getitem__) for i in range(POOL_GROUPS)]


def build(path: Path, trajectories: int, steps: int, completion_chars: int = 300,
          text_index: bool = False) -> dict:
    """Write ``trajectories`` trajectories over ``steps`` steps (into a file
    with the text index from the start, with ``text_index``); return rates."""
    pool = group_pool(completion_chars)
    n_groups = trajectories // GROUP_SIZE
    with StoreWriter(path) as writer:
        if text_index:
            build_text_index(writer.database)
        run_id = writer.start_run("bench", "arithmetic", {"group_size": GROUP_SIZE}, {})
        started, cpu_started = time.perf_counter(), time.process_time()
        g = 0
        for step in range(steps):
            end = (step + 1) * n_groups // steps
            groups = [pool[k % len(pool)] for k in range(g, end)]
            writer.write_groups(run_id, step, groups)
            writer.write_step(run_id, step, {"reward": 0.4, "reward_std": 0.2, "kl": 0.01,
                                             "completions/mean_length": 75.0, "loss": 0.1,
                                             **({"eval/pass_at_1": 0.5} if step % 50 == 0 else {})})
            if step % 100 == 0:
                writer.write_event(run_id, "eval", {"pass_at_1": 0.5}, step=step)
            g = end
        seconds = time.perf_counter() - started
        cpu_seconds = time.process_time() - cpu_started
    return {"run_id": run_id, "seconds": seconds, "traj_per_s": g * GROUP_SIZE / seconds,
            "traj_per_cpu_s": g * GROUP_SIZE / cpu_seconds}


def per_group_rate(path: Path, completion_chars: int, text_index: bool, trajectories: int = 40_000) -> float:
    """Trajectories/s when every group is its own transaction (write_group)."""
    pool = group_pool(completion_chars)
    with StoreWriter(path) as writer:
        if text_index:
            build_text_index(writer.database)
        run_id = writer.start_run("per-group", "arithmetic", {}, {})
        started = time.perf_counter()
        for k in range(trajectories // GROUP_SIZE):
            writer.write_group(run_id, k // 16, pool[k % len(pool)])
        return trajectories / (time.perf_counter() - started)


def percentiles(wall: list[float], cpu: list[float]) -> dict:
    """p50/p95/max of wall-clock times and p95 of CPU times, in ms."""
    def pick(samples: list[float], q: float) -> float:
        samples = sorted(samples)
        return round(samples[min(len(samples) - 1, int(q * len(samples)))] * 1e3, 3)
    return {"n": len(wall), "p50_ms": pick(wall, 0.5), "p95_ms": pick(wall, 0.95),
            "max_ms": pick(wall, 1.0), "cpu_p95_ms": pick(cpu, 0.95)}


def time_queries(path: Path, run_id: int, steps: int, repeats: int) -> dict:
    rng = random.Random(0)
    reader = StoreReader(path)
    last_id = reader.rollouts_since(run_id, 0, 1)[-1]["id"]
    with_turns = [t["id"] for t in reader.group(1)["trajectories"]]  # pool group 0 has turns
    last_event = reader.events(run_id)[-1]["id"]
    # 16 characters from the middle of the newest completion: text that one pool completion in 512 holds.
    newest = reader.trajectory(last_id)["completion"]
    common = newest[len(newest) // 2:][:16]
    queries = {
        "latest_step": lambda: reader.latest_step(run_id),
        "step_series_all": lambda: reader.step_series(run_id),
        "metric_series_reward_all": lambda: reader.metric_series(run_id, ("reward",)),
        "metric_series_reward_500_points": lambda: reader.metric_series(run_id, ("reward",),
                                                                        max_points=500),
        "step_series_tail": lambda: reader.step_series(run_id, since_step=steps - 5),
        "groups_of_step": lambda: reader.groups_of_step(run_id, rng.randrange(steps)),
        "trajectory_with_turns": lambda: reader.trajectory(rng.choice(with_turns)),
        "trajectory_random": lambda: reader.trajectory(rng.randrange(1, last_id + 1)),
        "rollouts_since": lambda: reader.rollouts_since(run_id, last_id - rng.randrange(200)),
        "events_since": lambda: reader.events(run_id, since_id=last_event - rng.randrange(1, 5)),
        "runs": reader.runs,
        "steps": lambda: reader.steps(run_id),
        # the TUI's search (`/`): newest first, within its time budget
        "search_common": lambda: reader.search(run_id, common, limit=50, budget_s=SEARCH_BUDGET_S),
        "search_absent": lambda: reader.search(run_id, "no such text", budget_s=SEARCH_BUDGET_S),
        # absent, but every trigram of it is in most completions: the index's worst case
        "search_absent_frequent": lambda: reader.search(run_id, FREQUENT_ABSENT, budget_s=SEARCH_BUDGET_S),
    }
    results = {}
    for name, query in queries.items():
        runs = min(repeats, 20) if name.startswith("search") else repeats  # a search may take its whole budget
        wall, cpu = [], []
        for _ in range(runs):
            started, cpu_started = time.perf_counter(), time.process_time()
            result = query()
            wall.append(time.perf_counter() - started)
            cpu.append(time.process_time() - cpu_started)
        assert result is not None and (not isinstance(result, list) or result), name
        results[name] = percentiles(wall, cpu)
        if isinstance(result, Found):  # what the last one found, and whether it read the whole run
            results[name] |= {"matches": len(result.rows), "read_every_trajectory": result.continue_before is None}
    reader.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--completion-chars", type=int, default=300,
                        help="characters of each completion (8000: long reasoning)")
    parser.add_argument("--repeats", type=int, default=200, help="timings per query")
    parser.add_argument("--db", type=Path, help="keep the run file here; reuse it if it exists")
    parser.add_argument("--text-index", action="store_true",
                        help="with the text index (rlab index): from the start when the file is built, "
                             "else built on the reused file (text_index_build_s)")
    args = parser.parse_args()
    ingest: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = args.db or Path(tmp) / "bench.db"
        if path.exists():  # what it holds (tests/bench/tui.py streams steps into it)
            with StoreReader(path) as reader:
                run_id = reader.run_by_name("bench")["id"]
                args.trajectories = reader.rollouts_since(run_id, 0, 1)[-1]["id"]
                args.steps = reader.latest_step(run_id)["step"] + 1
            if args.text_index:
                with StoreWriter(path) as writer:
                    seconds = build_text_index(writer.database)
                ingest = {} if seconds is None else {"text_index_build_s": round(seconds, 1)}
        else:
            built = build(path, args.trajectories, args.steps, args.completion_chars, args.text_index)
            run_id = built["run_id"]
            ingest = {"ingest_traj_per_s": round(built["traj_per_s"]),
                      "ingest_traj_per_cpu_s": round(built["traj_per_cpu_s"]),
                      "ingest_seconds": round(built["seconds"], 1),
                      "ingest_traj_per_s_per_group_txn": round(per_group_rate(
                          Path(tmp) / "per_group.db", args.completion_chars, args.text_index))}
        size_mb = sum(p.stat().st_size for p in path.parent.glob(path.name + "*")) / 2**20
        queries = time_queries(path, run_id, args.steps, args.repeats)
        with StoreReader(path) as reader:
            text_index = reader.uses_text_index("no such text")  # built here, or by `rlab index` before
        started = time.perf_counter()
        export_run(path, run_id, Path(tmp) / "export")
        export_seconds = time.perf_counter() - started
    tui = {k: v for k, v in queries.items() if not k.startswith("search")}
    print(json.dumps({
        "trajectories": args.trajectories, "steps": args.steps, "group_size": GROUP_SIZE,
        "completion_chars": args.completion_chars, "text_index": text_index,
        "file_mb": round(size_mb, 1), **ingest,
        "export_seconds": round(export_seconds, 1),
        "queries": queries,
        "required_query_p95_ms_max": max(queries[name]["p95_ms"] for name in REQUIRED),
        "tui_query_p95_ms_max": max(v["p95_ms"] for v in tui.values()),
        "cpus": os.cpu_count(), "load_average_1min": round(os.getloadavg()[0], 2),
    }, indent=2))


if __name__ == "__main__":
    main()
