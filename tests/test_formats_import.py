"""`rlab import`: each format's fixture lands as one run with the right rows,
and a malformed file names the file and place, writing nothing."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rlab.store.formats import FormatError, detect_format, import_path
from rlab.store.reader import StoreReader
from rlab.engine.cli.main import main

FIXTURES = Path(__file__).parent / "fixtures" / "formats"


def _run_rows(db: Path, run_id: int) -> list[dict]:
    """Every trajectory of the run with its group's prompt, in step/group/index order."""
    with StoreReader(db) as reader:
        rows = []
        for step in reader.steps(run_id):
            for light in reader.groups_of_step(run_id, step):
                group = reader.group(light["id"])
                rows += [{**t, "prompt": group["prompt"], "group_idx": group["idx"],
                          "judge_status": group["judge_status"]} for t in group["trajectories"]]
        return rows


def _count_runs(db: Path) -> int:
    if not db.exists():
        return 0
    with StoreReader(db) as reader:
        return len(reader.runs())


def test_trl_completions_import_with_logged_metrics(tmp_path):
    db = tmp_path / "r.db"
    summary = import_path(FIXTURES / "trl", db)
    assert (summary.format, summary.steps, summary.groups, summary.trajectories) == ("trl", 2, 4, 8)
    rows = _run_rows(db, summary.run_id)
    assert [r["completion"] for r in rows] == ["5", "6", "8", "8", "2", "two", "6", "6"]
    assert [r["prompt"] for r in rows[:4]] == ["What is 2+3?"] * 2 + ["What is 4+4?"] * 2
    assert rows[4]["prompt"] == "What is 1+1?"  # conversational prompt column
    assert [r["reward"] for r in rows] == [2.0, 1.0, 2.0, 2.0, 2.0, 0.0, 2.0, 2.0]
    assert rows[1]["components"] == {"format_reward": 1.0, "correct_reward": 0.0}
    assert [r["advantage"] for r in rows[:2]] == [0.7071, -0.7071]
    assert rows[5]["messages"] == [{"role": "user", "content": "What is 1+1?"},
                                   {"role": "assistant", "content": "two"}]
    with StoreReader(db) as reader:
        metrics = {m["step"]: m for m in reader.step_metrics(summary.run_id)}
    # logged values (trainer_state.json log_history) win over computed ones
    assert metrics[1]["reward"] == pytest.approx(1.6)
    assert metrics[2]["kl"] == pytest.approx(0.002)
    # computed where TRL logged nothing: one of the two step-1 groups has equal rewards
    assert metrics[1]["frac_reward_zero_std"] == 0.5
    assert metrics[1]["rewards/correct_reward/std"] == pytest.approx(0.5)


def test_verifiers_results_import(tmp_path):
    db = tmp_path / "r.db"
    summary = import_path(FIXTURES / "verifiers", db)
    assert (summary.steps, summary.groups, summary.trajectories) == (1, 2, 6)
    rows = _run_rows(db, summary.run_id)
    assert [r["completion"] for r in rows] == ["cba", "abc", "cba", "yx", "xy", "yx"]
    assert [r["reward"] for r in rows] == pytest.approx([1.0, 0.2, 1.0] * 2)
    assert rows[1]["components"] == {"lcs_reward": 0.0, "format_reward": 1.0}
    assert rows[0]["prompt"] == "Reverse 'abc'"
    assert rows[0]["messages"][0] == {"role": "system", "content": "Reverse the text."}
    assert [r["truncated"] for r in rows[:3]] == [0, 0, 1]
    assert rows[0]["completion_tokens"] == 3 and rows[0]["prompt_tokens"] == 12
    # GRPO advantages within the example's rollouts: mean-centred
    assert sum(r["advantage"] for r in rows[:3]) == pytest.approx(0.0, abs=1e-9)
    with StoreReader(db) as reader:
        run = reader.run(summary.run_id)
    assert run["scenario"] == "reverse-text" and run["config"]["rollouts_per_example"] == 3


@pytest.mark.parametrize("source", ["trl", "verifiers", "art", "inspect/capitals.eval", "verl"])
def test_rlab_runs_counts_the_steps_the_import_line_said(tmp_path, source):
    """Issue 47, 4: an imported verifiers run (its rollouts at step 0) showed 1 step in the
    import line and 0 in `rlab runs`."""
    summary = import_path(FIXTURES / source, tmp_path / "r.db")
    with StoreReader(tmp_path / "r.db") as reader:
        (run,) = reader.runs()
    assert run["steps"] == summary.steps


def test_art_jsonl_and_parquet_with_ruler_judge(tmp_path):
    db = tmp_path / "r.db"
    summary = import_path(FIXTURES / "art", db)
    assert (summary.steps, summary.groups, summary.trajectories) == (2, 4, 8)
    rows = _run_rows(db, summary.run_id)
    # step 1 (legacy JSONL) and step 2 (Parquet v2) hold the same groups
    first, second = rows[:4], rows[4:]
    for key in ("completion", "reward", "components", "judge_score", "judge_rank",
                "judge_explanation", "prompt"):
        assert [r[key] for r in first] == [r[key] for r in second], key
    assert [r["completion"] for r in first] == ["Rain taps the window", "I like turtles", "7", "9"]
    assert [r["judge_score"] for r in first] == [0.9, 0.1, 1.0, 0.0]
    assert [r["judge_rank"] for r in first] == [1, 2, 1, 2]
    assert first[1]["judge_explanation"] == "Off topic."
    assert first[0]["components"] == {"independent_reward": 0.2}
    assert first[0]["judge_status"] == "ok"
    assert first[0]["prompt"] == "Write a haiku about rain"


def test_inspect_eval_log_import(tmp_path):
    db = tmp_path / "r.db"
    summary = import_path(FIXTURES / "inspect" / "capitals.eval", db)
    assert (summary.steps, summary.groups, summary.trajectories) == (1, 2, 4)
    rows = _run_rows(db, summary.run_id)
    assert [r["completion"] for r in rows] == ["Paris", "Lyon", "6", "six"]
    assert rows[3]["components"] == {"match": 0.5, "model_graded_qa": 0.5}
    assert [r["reward"] for r in rows] == [1.0, 0.0, 1.0, 0.5]
    assert rows[1]["judge_explanation"] == "Wrong city."
    assert rows[0]["messages"][-1] == {"role": "assistant", "content": "Paris"}


def test_verl_dump_import_groups_repeated_prompts(tmp_path):
    db = tmp_path / "r.db"
    summary = import_path(FIXTURES / "verl", db)
    assert (summary.steps, summary.groups, summary.trajectories) == (2, 3, 6)
    rows = _run_rows(db, summary.run_id)
    assert [r["group_idx"] for r in rows] == [0, 0, 1, 1, 0, 0]
    assert [r["reward"] for r in rows] == [1.0, 0.0, 1.0, 1.0, 1.0, 0.0]
    assert rows[1]["components"] == {"acc": 0.0}
    assert rows[1]["details"]["gts"] == "2" and rows[1]["details"]["pred"] == "3"


@pytest.mark.parametrize("path,expected", [
    ("trl", "trl"), ("trl/completions", "trl"), ("verifiers", "verifiers"), ("art", "art"),
    ("art/trajectories/train/0001.jsonl", "art"), ("inspect/capitals.eval", "inspect"),
    ("verl", "verl")])
def test_format_detected_from_the_files(path, expected):
    assert detect_format(FIXTURES / path) == expected


def _break_jsonl(src: Path, dst: Path, line: int, text: str) -> Path:
    lines = src.read_text().splitlines()
    lines[line - 1] = text
    dst.write_text("\n".join(lines) + "\n")
    return dst


def _malformed_verifiers(tmp: Path) -> Path:
    folder = tmp / "vf"
    shutil.copytree(FIXTURES / "verifiers", folder)
    record = json.loads((folder / "results.jsonl").read_text().splitlines()[3])
    del record["reward"]
    _break_jsonl(folder / "results.jsonl", folder / "results.jsonl", 4, json.dumps(record))
    return folder


def _malformed_verl(tmp: Path) -> Path:
    folder = tmp / "verl"
    shutil.copytree(FIXTURES / "verl", folder)
    _break_jsonl(folder / "2.jsonl", folder / "2.jsonl", 2, '{"input": "x", "output": ')
    return folder


def _malformed_art(tmp: Path) -> Path:
    folder = tmp / "art"
    shutil.copytree(FIXTURES / "art", folder)
    path = folder / "trajectories" / "train" / "0002.parquet"
    rows = pq.read_table(path).to_pylist()
    rows[3]["trajectory_json"] = "{not json"
    pq.write_table(pa.Table.from_pylist(rows), path)
    return folder


def _malformed_trl(tmp: Path) -> Path:
    folder = tmp / "trl"
    shutil.copytree(FIXTURES / "trl", folder)
    path = folder / "completions" / "completions_00002.parquet"
    table = pq.read_table(path).to_pylist()
    for row in table:
        row["correct_reward"] = "high"
    pq.write_table(pa.Table.from_pylist(table), path)
    return folder


def _inspect_with_sample(tmp: Path, change) -> Path:
    """A copy of the Inspect fixture whose sample 2 (epoch 2) ``change(sample)`` edited."""
    path = tmp / "bad.eval"
    with zipfile.ZipFile(FIXTURES / "inspect" / "capitals.eval") as src, \
            zipfile.ZipFile(path, "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            if name == "samples/2_epoch_2.json":
                sample = json.loads(data)
                change(sample)
                data = json.dumps(sample).encode()
            dst.writestr(name, data)
    return path


def _malformed_inspect(tmp: Path) -> Path:
    return _inspect_with_sample(tmp, lambda sample: sample["scores"]["match"].update(value="maybe"))


def _verifiers_bad_token_count(tmp: Path) -> Path:
    folder = tmp / "vf"
    shutil.copytree(FIXTURES / "verifiers", folder)
    record = json.loads((folder / "results.jsonl").read_text().splitlines()[1])
    record["token_usage"] = {"input_tokens": "many", "output_tokens": 3}
    _break_jsonl(folder / "results.jsonl", folder / "results.jsonl", 2, json.dumps(record))
    return folder


def _inspect_bad_token_count(tmp: Path) -> Path:
    return _inspect_with_sample(tmp, lambda sample: sample["output"].update(usage={"input_tokens": 1.5}))


def _art_message_without_role(tmp: Path) -> Path:
    folder = tmp / "art"
    shutil.copytree(FIXTURES / "art", folder)
    path = folder / "trajectories" / "train" / "0002.parquet"
    rows = pq.read_table(path).to_pylist()
    for row in rows:
        row["messages"] = None
    rows[3]["trajectory_json"] = None
    rows[3]["messages"] = [{"content": "hi"}]  # the column's struct then has no role at all
    table = pa.Table.from_pylist(rows)
    pq.write_table(table, path)
    return folder


@pytest.mark.parametrize("make,file_part,place", [
    (_malformed_verifiers, "results.jsonl", "line 4: missing field 'reward'"),
    # issue 46: a value our readers convert (a token count, a message) is the file's error, not ours
    (_verifiers_bad_token_count, "results.jsonl", "line 2, field 'token_usage.input_tokens'"),
    (_inspect_bad_token_count, "bad.eval", "samples/2_epoch_2.json, field 'output.usage.input_tokens'"),
    (_art_message_without_role, "0002.parquet", "row 3, column 'messages'"),
    (_malformed_verl, "2.jsonl", "line 2: not JSON"),
    (_malformed_art, "0002.parquet", "row 3, column 'trajectory_json'"),
    (_malformed_trl, "completions_00002.parquet", "row 0, column 'correct_reward'"),
    (_malformed_inspect, "bad.eval", "samples/2_epoch_2.json, scores.match"),
])
def test_malformed_file_names_file_and_place_and_writes_nothing(tmp_path, capsys, make,
                                                                file_part, place):
    db = tmp_path / "r.db"
    import_path(FIXTURES / "verl", db)  # an earlier run in the file stays untouched
    path = make(tmp_path)
    with pytest.raises(FormatError) as caught:
        import_path(path, db)
    assert file_part in str(caught.value) and place in str(caught.value)
    assert _count_runs(db) == 1
    # the CLI prints it as one error line, exit status 2, no traceback
    assert main(["import", str(path), "--db", str(db)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlab: error: ") and place in err[0]
    assert _count_runs(db) == 1


def test_a_failure_while_writing_rolls_the_whole_import_back(tmp_path, monkeypatch):
    """One transaction per import: a crash after some groups were written
    leaves no run, no groups, no steps."""
    from rlab.store.writer import StoreWriter

    db = tmp_path / "r.db"
    calls = {"n": 0}
    original = StoreWriter.write_step

    def failing(self, run_id, step, metrics):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("disk on fire")
        return original(self, run_id, step, metrics)

    monkeypatch.setattr(StoreWriter, "write_step", failing)
    with pytest.raises(RuntimeError):
        import_path(FIXTURES / "trl", db)
    import sqlite3
    conn = sqlite3.connect(db)
    counts = [conn.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0]
              for t in ("runs", "groups", "trajectories", "steps")]
    conn.close()
    assert counts == [0, 0, 0, 0]


def test_unknown_layout_and_taken_name_are_clear_errors(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    db = tmp_path / "r.db"
    assert main(["import", str(tmp_path / "empty"), "--db", str(db)]) == 2
    assert "no known format found" in capsys.readouterr().err
    assert main(["import", str(FIXTURES / "verl"), "--db", str(db), "--name", "a"]) == 0
    capsys.readouterr()
    assert main(["import", str(FIXTURES / "verl"), "--db", str(db), "--name", "a"]) == 2
    assert "already exists" in capsys.readouterr().err
    # without --name a free one is picked
    assert main(["import", str(FIXTURES / "verl"), "--db", str(db)]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "verl-verl"


def test_real_inspect_log_imports(tmp_path):
    """inspect_real/capitals.eval was written by Inspect 0.3.285 (make_log.py:
    mockllm/model, 2 samples x 2 epochs, match() and includes() scorers), with
    zstd-compressed members."""
    db = tmp_path / "r.db"
    summary = import_path(FIXTURES / "inspect_real" / "capitals.eval", db)
    assert (summary.steps, summary.groups, summary.trajectories) == (1, 2, 4)
    rows = _run_rows(db, summary.run_id)
    assert {r["completion"] for r in rows} == {"Default output from mockllm/model"}
    assert [r["components"] for r in rows] == [{"match": 0.0, "includes": 0.0}] * 2 + \
        [{"match": 0.0, "includes": 1.0}] * 2
    assert [r["reward"] for r in rows] == [0.0, 0.0, 0.5, 0.5]
    assert rows[0]["prompt"] == "Capital of France?"
    assert all(r["judge_explanation"] is None for r in rows)  # rule scorers echo the answer
    with StoreReader(db) as reader:
        assert reader.step_metrics(summary.run_id)[0]["includes/accuracy"] == 0.5


@pytest.mark.parametrize("name", ["../../x", ".hidden", "a/b", "", "x" * 101])
def test_an_imported_run_takes_the_run_name_rule_of_rlab_run(tmp_path, capsys, name):
    """Issue 40: ``rlab import --name ../../x`` skipped the rule; a resume then failed with
    "rlab: error: model_dir". A run name names its folder under rlab_runs/."""
    db = tmp_path / "r.db"
    assert main(["import", str(FIXTURES / "verl"), "--db", str(db), "--name", name]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"rlab: error: --name {name!r}: ")
    assert "letters, digits, '.', '_' or '-'" in lines[0]
    assert not db.exists()
