"""--report-to trackio,tensorboard: the step metrics read back from each dashboard's own files.

TensorBoard's event files are read with the tensorboard package's
EventAccumulator, Trackio's local database with trackio's SQLiteStorage
(in a child process: trackio fixes its storage folder, $TRACKIO_DIR, at
import). Each test skips when its package is not installed
(pip install 'rollout-lab[dashboards]').
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

from rlab.engine.cli.run import engine_main
from rlab.engine.run.config import RunConfig
from rlab.engine.integrations.reporting import MissingDashboardError, Reporter, dashboard_names
from rlab.store.reader import StoreReader

STEPS = {1: {"reward": 0.25, "rewards/correct/mean": 0.5, "frac_reward_zero_std": 0.75, "num_tokens": 96},
         2: {"reward": 0.5, "rewards/correct/mean": 0.625, "frac_reward_zero_std": 0.5, "num_tokens": 90,
             "eval/pass_at_1": 0.4}}


def _scalars(log_dir) -> dict[str, dict[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir))
    events.Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}


def test_dashboard_names_follow_the_trainer_and_drop_what_is_not_a_number():
    named = dashboard_names({"reward": 0.5, "eval/pass_at_1": 0.25, "rewards/correct/std": 0.1,
                             "flag": True, "missing": None, "bad": float("nan"), "text": "x", "num_tokens": 7})
    assert named == {"train/reward": 0.5, "eval/pass_at_1": 0.25, "train/rewards/correct/std": 0.1,
                     "train/num_tokens": 7.0}


def test_a_missing_package_names_the_extra_before_anything_starts(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "trackio" else real(name, *a))
    with pytest.raises(MissingDashboardError, match=r"rollout-lab\[trackio\]"):
        Reporter(["trackio"], tmp_path / "r.db")
    # Through the command line: one `rlab: error:` line, and no run file written.
    code = engine_main(["--db", str(tmp_path / "r.db"), "--report-to", "trackio", "--max-steps", "1"])
    assert code == 2 and not (tmp_path / "r.db").exists()


def test_an_unknown_dashboard_is_refused_by_flag(capsys):
    assert engine_main(["--report-to", "wandb"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["rlab: error: --report-to wandb: must be 'trackio' or 'tensorboard'"]
    assert RunConfig(report_to=["trackio", "tensorboard"]).report_to == ["trackio", "tensorboard"]


def test_tensorboard_event_files_hold_every_step(tmp_path):
    pytest.importorskip("tensorboard")
    reporter = Reporter(["tensorboard"], tmp_path / "lab.db")
    reporter.open("run-a", {"lr": 1e-3})
    for step, metrics in STEPS.items():
        reporter.log(step, metrics)
    reporter.close()
    scalars = _scalars(tmp_path / "lab.db.tensorboard" / "run-a")
    assert scalars["train/reward"] == {1: 0.25, 2: 0.5}
    assert scalars["train/rewards/correct/mean"] == {1: 0.5, 2: 0.625}
    assert scalars["train/num_tokens"] == {1: 96.0, 2: 90.0}
    assert scalars["eval/pass_at_1"] == pytest.approx({2: 0.4})


def test_trackio_logs_locally_and_reads_back(tmp_path):
    pytest.importorskip("trackio")
    script = textwrap.dedent(f"""
        import json, sys
        from pathlib import Path
        from rlab.engine.integrations.reporting import Reporter
        reporter = Reporter(["trackio"], Path({str(tmp_path / "lab.db")!r}))
        reporter.open("run-a", {{"lr": 0.001, "api_key": "sk-not-a-real-key-123456"}})
        for step, metrics in {STEPS!r}.items():
            reporter.log(step, metrics)
        reporter.close()
        from trackio.sqlite_storage import SQLiteStorage
        print(json.dumps({{"logs": SQLiteStorage.get_logs("lab", "run-a"),
                          "config": SQLiteStorage.get_run_config("lab", "run-a")}}, default=str))
        """)
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio"), "HF_HUB_OFFLINE": "1"}
    env.pop("TRACKIO_SPACE_ID", None)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, "trackio's console notes must go to stderr: stdout carries the summary line"
    out = json.loads(lines[0])
    by_step = {row["step"]: row for row in out["logs"]}
    assert by_step[1]["train/reward"] == 0.25 and by_step[2]["train/reward"] == 0.5
    assert by_step[2]["train/rewards/correct/mean"] == 0.625 and by_step[2]["eval/pass_at_1"] == 0.4
    assert out["config"]["lr"] == 0.001 and "sk-not-a-real-key-123456" not in json.dumps(out["config"])
    assert (tmp_path / "trackio" / "lab.db").is_file()


def test_a_headless_run_reports_what_it_stores(tmp_path, raw_tiny_model_dir):
    """`rlab run --headless --report-to trackio,tensorboard`: both dashboards
    hold the stored step metrics, and stdout still ends in the summary line."""
    pytest.importorskip("tensorboard")
    pytest.importorskip("trackio")
    db = tmp_path / "lab.db"
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio"), "HF_HUB_OFFLINE": "1"}
    env.pop("TRACKIO_SPACE_ID", None)
    done = subprocess.run(
        [sys.executable, "-m", "rlab.engine.cli", "run", "--headless", "--model", str(raw_tiny_model_dir),
         "--db", str(db), "--name", "tb", "--max-steps", "2", "--prompts-per-step", "2", "--group-size", "2",
         "--eval-size", "5", "--eval-every", "2", "--report-to", "trackio,tensorboard",
         "--report-dir", str(tmp_path / "dash")],
        capture_output=True, text=True, env=env, timeout=240, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    stored = {s["step"]: s for s in StoreReader(db).step_series(summary["run_id"])}
    scalars = _scalars(tmp_path / "dash" / "tb")
    assert scalars["train/reward"] == pytest.approx({1: stored[1]["reward"], 2: stored[2]["reward"]})
    assert scalars["train/frac_reward_zero_std"] == pytest.approx(
        {1: stored[1]["frac_reward_zero_std"], 2: stored[2]["frac_reward_zero_std"]})
    assert set(scalars["eval/pass_at_1"]) == {0, 2}  # the initial eval (step 0) and step 2's
    assert "train/completions/clipped_ratio" in scalars and "train/step_time" in scalars
    read = subprocess.run([sys.executable, "-c", "import json; from trackio.sqlite_storage import SQLiteStorage; "
                           "print(json.dumps(SQLiteStorage.get_logs('lab', 'tb'), default=str))"],
                          capture_output=True, text=True, env=env, timeout=120)
    logs = {row["step"]: row for row in json.loads(read.stdout.strip().splitlines()[-1])}
    assert logs[1]["train/reward"] == pytest.approx(stored[1]["reward"])
    assert logs[2]["train/reward"] == pytest.approx(stored[2]["reward"])
