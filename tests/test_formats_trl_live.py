"""TRL for real: files a GRPOTrainer wrote import as TRL wrote them, a run
followed live (`rlab watch --follow`'s importer) lands while it trains, and
the TRL callback writes the same rows plus TRL's own metrics.

The live test runs TRL's GRPOTrainer on the tiny policy (random weights, CPU,
4 steps; about a minute) and needs the test-only extra:

    .venv/bin/pip install -e ".[dev,trl]"
    .venv/bin/python -m pytest -q -m slow tests/test_formats_trl_live.py
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from rlab.store.formats import import_path
from test_formats_import import FIXTURES, _run_rows

REPO = Path(__file__).resolve().parents[1]


def _text(value) -> str:
    """Text of a TRL prompt/completion cell: a string, or the last message's content."""
    return value if isinstance(value, str) else value[-1]["content"]


def parquet_rows(path: Path) -> list[dict]:
    """What TRL wrote, read straight from its Parquet file (not through rlab)."""
    table = pq.read_table(path)
    names = [c for c in table.column_names if c not in ("step", "prompt", "completion",
                                                        "advantage")]
    return [{"prompt": _text(row["prompt"]), "completion": _text(row["completion"]),
             "components": {n: row[n] for n in names}, "advantage": row["advantage"],
             "reward": sum(row[n] for n in names)} for row in table.to_pylist()]


def assert_rows_match_parquet(db: Path, run_id: int, completions_dir: Path) -> list[int]:
    """Every completions file's rows equal the run's trajectories of that step, in order."""
    rows = _run_rows(db, run_id)
    files = sorted(completions_dir.glob("completions_*.parquet"))
    assert files
    by_step: dict[int, list[dict]] = {}
    from rlab.store.reader import StoreReader

    with StoreReader(db) as reader:
        steps = reader.steps(run_id)
    index = 0
    for step in steps:
        by_step[step] = []
        with StoreReader(db) as reader:
            count = sum(len(g["trajectories"]) for g in reader.groups_of_step(run_id, step))
        by_step[step] = rows[index:index + count]
        index += count
    for file in files:
        step = int(file.stem.split("_")[1])
        expected = parquet_rows(file)
        got = by_step[step]
        assert [(r["prompt"], r["completion"]) for r in got] == \
            [(e["prompt"], e["completion"]) for e in expected]
        assert [r["components"] for r in got] == [e["components"] for e in expected]
        assert [r["reward"] for r in got] == pytest.approx([e["reward"] for e in expected])
        assert [r["advantage"] for r in got] == pytest.approx([e["advantage"] for e in expected])
    return sorted(int(f.stem.split("_")[1]) for f in files)


def test_real_trl_output_dir_imports_as_written(tmp_path):
    """tests/fixtures/formats/trl_real was written by TRL 1.16 GRPOTrainer
    (tests/trl_tiny_grpo.py, 3 steps, 1 prompt x 4 generations per step)."""
    db = tmp_path / "r.db"
    summary = import_path(FIXTURES / "trl_real", db)
    assert (summary.steps, summary.groups, summary.trajectories) == (3, 3, 12)
    assert assert_rows_match_parquet(db, summary.run_id,
                                     FIXTURES / "trl_real" / "completions") == [1, 2, 3]
    from rlab.store.reader import StoreReader

    with StoreReader(db) as reader:
        metrics = {m["step"]: m for m in reader.step_metrics(summary.run_id)}
    assert metrics[1]["step_time"] > 0 and metrics[1]["rewards/short_reward/mean"] == 0.5
    assert metrics[1]["completions/clipped_ratio"] == 0.5


@pytest.mark.slow
def test_trl_run_followed_live_and_through_the_callback(tmp_path, raw_tiny_model_dir):
    pytest.importorskip("trl")
    out, followed_db, callback_db = tmp_path / "trl-out", tmp_path / "f.db", tmp_path / "c.db"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    follower = subprocess.Popen(
        [sys.executable, "-P", "-m", "rlab.engine.cli", "follow", str(out), "--db",
         str(followed_db), "--name", "live", "--format", "trl", "--interval", "0.2"],
        env=env, stderr=subprocess.PIPE)
    trainer = subprocess.Popen(
        [sys.executable, str(REPO / "tests" / "trl_tiny_grpo.py"), "--out", str(out),
         "--steps", "4", "--model", str(raw_tiny_model_dir), "--rlab-db", str(callback_db)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    from rlab.store.reader import StoreReader

    seen_while_training = False
    try:
        while trainer.poll() is None:
            if followed_db.exists():
                with StoreReader(followed_db) as reader:
                    run = reader.run_by_name("live")
                    if run and reader.steps(run["id"]):
                        seen_while_training = True
            time.sleep(0.5)
        assert trainer.returncode == 0, trainer.stderr.read().decode()[-3000:]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with StoreReader(followed_db) as reader:
                if len(reader.steps(reader.run_by_name("live")["id"])) == 4:
                    break
            time.sleep(0.3)
    finally:
        follower.send_signal(signal.SIGTERM)
        follower.wait(timeout=60)
        if trainer.poll() is None:
            trainer.kill()
    assert follower.returncode == 0, follower.stderr.read().decode()
    assert seen_while_training, "no step was imported while the trainer ran"
    with StoreReader(followed_db) as reader:
        run = reader.run_by_name("live")
    assert run["status"] == "finished"
    assert assert_rows_match_parquet(followed_db, run["id"], out / "completions") == [1, 2, 3, 4]
    # the callback wrote the same rows, and TRL's own metrics for each step
    with StoreReader(callback_db) as reader:
        callback_run = reader.runs()[0]
        metrics = {m["step"]: m for m in reader.step_metrics(callback_run["id"])}
    assert callback_run["status"] == "finished"
    assert assert_rows_match_parquet(callback_db, callback_run["id"], out / "completions") == \
        [1, 2, 3, 4]
    assert sorted(metrics) == [1, 2, 3, 4]
    assert all("step_time" in m and "rewards/correct_reward/mean" in m for m in metrics.values())
