"""Export round trip: export a run, read the files back, same numbers."""

import json
import math

import pytest

from rlab.store.export import export_run, list_runs
from rlab.store.reader import StoreReader
from rlab.store.writer import StoreWriter
from test_store_helpers import make_group


@pytest.fixture
def run_file(tmp_path):
    path = tmp_path / "runs.db"
    with StoreWriter(path) as writer:
        run_id = writer.start_run("exp", "arithmetic", {"lr": 1e-5},
                                  {"dataset_sha256": "ab" * 32, "seed": 7})
        for step in range(4):
            # step s: rewards 1.0 for the first s+1 trajectories of each group
            groups = [make_group(i, size=4, reward_of=lambda j, s=step: float(j <= s))
                      for i in range(3)]
            writer.write_groups(run_id, step, groups)
            writer.write_step(run_id, step, {"reward": 0.1 * step,
                                             **({"eval/pass_at_1": 0.3} if step == 3 else {})})
        writer.write_checkpoint(run_id, 2, "/ckpt/2")
        writer.resume_run(run_id)  # step 3 superseded: left out of the export
        writer.set_status(run_id, "finished")
    return path, run_id


def test_export_round_trip_same_numbers(run_file, tmp_path):
    path, run_id = run_file
    written = export_run(path, "exp", tmp_path / "out")
    assert set(written) == {"results", "summary", "manifest"}
    lines = [json.loads(line) for line in written["results"].read_text().splitlines()]
    assert len(lines) == 3 * 3 * 4
    reader = StoreReader(path)
    stored = {t["id"]: t for step in reader.steps(run_id)
              for g in reader.groups_of_step(run_id, step) for t in g["trajectories"]}
    assert {line["trajectory_id"] for line in lines} == set(stored)
    for line in lines:
        row = stored[line["trajectory_id"]]
        assert (line["reward"], line["advantage"], line["parse_status"]) == (
            row["reward"], row["advantage"], row["parse_status"])
        assert line["components"] == {"correct": line["reward"]}
        assert line["prompt"].startswith("What is") and len(line["completion"]) == 300

    summary = json.loads(written["summary"].read_text())
    assert [s["step"] for s in summary["steps"]] == [0, 1, 2]
    for entry in summary["steps"]:
        rewards = [line["reward"] for line in lines if line["step"] == entry["step"]]
        mean = sum(rewards) / len(rewards)
        assert entry["trajectories"] == len(rewards)
        assert entry["pass_rate"] == pytest.approx((entry["step"] + 1) / 4)
        assert entry["reward_mean"] == pytest.approx(mean)
        assert entry["reward_std"] == pytest.approx(
            math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards)))
    assert summary["failure_modes"] == {
        "ok": sum(line["reward"] >= 1 for line in lines),
        "wrong": sum(line["reward"] < 1 for line in lines)}
    assert summary["eval_pass_at_1"] == []  # the eval at step 3 was superseded
    assert json.loads(written["manifest"].read_text()) == {"dataset_sha256": "ab" * 32,
                                                           "seed": 7}


def test_export_by_id_and_unknown_run(run_file, tmp_path):
    path, run_id = run_file
    assert export_run(path, run_id, tmp_path / "by_id")["results"].exists()
    with pytest.raises(KeyError, match="no run named or numbered 'nope'"):
        export_run(path, "nope", tmp_path / "x")


def test_list_runs_has_the_cli_fields(run_file):
    path, run_id = run_file
    (run,) = list_runs(path)
    assert {"id", "name", "scenario", "status", "steps"} <= set(run)
    assert (run["id"], run["name"], run["status"], run["steps"]) == (run_id, "exp", "finished", 2)  # steps 1 and 2
    json.dumps(run)  # the --json output must serialise
