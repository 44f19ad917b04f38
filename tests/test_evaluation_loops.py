"""rlab eval (frozen completions and a model), select, compare, inspect from the command line."""

from __future__ import annotations

import json
from pathlib import Path
import sqlite3

import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.utils import logging as transformers_logging

from rlab.engine.evaluation.compare import locked_room
from rlab.engine.evaluation.stats import mcnemar_exact, pass_at_k
from rlab.engine.run.manifest import sha256_files
from rlab.scenarios import get_scenario
from rlab.store.db import open_db
from rlab.store.reader import StoreReader
from rlab.engine.cli.main import main

EVAL = get_scenario("arithmetic").eval_examples()


def write_completions(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def frozen(path, right: set[int], count: int = 20, wrong: str = "0"):
    """Completions for the first ``count`` eval examples: the sum for indices in ``right``."""
    rows = []
    for i, ex in enumerate(EVAL[:count]):
        text = ex["answer"] if i in right else (wrong if i % 2 else "not a number")
        rows.append({"example_id": ex["id"], "completion": text, "note": f"row {i}"})
    return write_completions(path, rows)


def rlab(capsys, *args):
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_frozen_eval_pass_rate_is_known_exactly(tmp_path, capsys):
    right = {0, 1, 2, 3, 5, 8, 13, 17, 19}
    path = frozen(tmp_path / "c.jsonl", right)
    code, out, err = rlab(capsys, "eval", "--completions", path, "--db", tmp_path / "r.db",
                          "--out", tmp_path / "out", "--name", "frozen", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["n"] == 20 and summary["pass_at_1"] == 9 / 20 and summary["mean_reward"] == 9 / 20
    # 11 failures: odd indices answer "0" (wrong), even ones are not numbers (malformed).
    wrong = sum(1 for i in range(20) if i not in right and i % 2)
    assert summary["failures"]["wrong"]["count"] == wrong
    assert summary["failures"]["malformed"] == {"count": 11 - wrong, "example_id": EVAL[4]["id"]}
    written = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert (written["n"], written["pass_at_1"], written["mean_reward"]) == (20, 0.45, 0.45)
    assert written["run"]["kind"] == "eval"
    results = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [r["example_id"] for r in results] == [ex["id"] for ex in EVAL[:20]]
    assert sum(r["reward"] for r in results) == 9
    assert results[4]["details"]["frozen_fields"] == {"note": "row 4"}  # other fields are kept
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["kind"] == "eval" and manifest["split"] == "eval" and manifest["dataset"]["size"] == 20
    assert manifest["environment"]["packages"]["torch"] and "git_commit" in manifest["environment"]
    assert manifest["files"]["reward_file_sha256"] == manifest["scorer"]["source_sha256"]
    with StoreReader(tmp_path / "r.db") as reader:
        run = reader.run_by_name("frozen")
        assert run["kind"] == "eval" and run["status"] == "finished" and run["summary"]["n"] == 20
        assert [r["kind"] for r in reader.runs()] == ["eval"]


def test_frozen_results_round_trip_through_eval_out(tmp_path, capsys):
    """results.jsonl written by eval --out is itself a valid completions file."""
    first = frozen(tmp_path / "c.jsonl", {1, 2})
    rlab(capsys, "eval", "--completions", first, "--db", tmp_path / "r.db", "--out", tmp_path / "one")
    code, out, err = rlab(capsys, "eval", "--completions", tmp_path / "one" / "results.jsonl",
                          "--db", tmp_path / "r.db", "--json")
    assert code == 0, err
    assert json.loads(out)["pass_at_1"] == 0.1


@pytest.mark.parametrize("rows,line,words", [
    ([{"example_id": "add-1-1", "completion": "2"}], 1, "not in the dataset"),
    ([{"example_id": EVAL[0]["id"], "completion": "1"}, {"example_id": EVAL[1]["id"], "completion": "2"},
      {"example_id": EVAL[0]["id"], "completion": "3"}], 3, "repeats line 1"),
    ([{"example_id": EVAL[0]["id"], "completion": "1"}, {"example_id": EVAL[1]["id"]}], 2, "no completion"),
    ([{"example_id": EVAL[0]["id"], "completion": None}], 1, "no completion"),
    ([{"completion": "5"}], 1, "no example_id"),
])
def test_tampered_completions_are_refused_naming_the_line(tmp_path, capsys, rows, line, words):
    path = write_completions(tmp_path / "c.jsonl", rows)
    code, out, err = rlab(capsys, "eval", "--completions", path, "--db", tmp_path / "r.db")
    assert code == 2
    assert err.startswith("rlab: error: ") and f"line {line}:" in err and words in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "r.db").exists()  # a refused file records nothing


def test_bad_json_line_is_refused(tmp_path, capsys):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"example_id": EVAL[0]["id"], "completion": "1"}) + "\n{oops\n")
    code, _, err = rlab(capsys, "eval", "--completions", path, "--db", tmp_path / "r.db")
    assert code == 2 and "line 2: not valid JSON" in err


MANIFEST = {
    "kind": "eval", "split": "eval", "dataset": {"sha256": "d1", "size": 20},
    "prompt": {"system_prompt_sha256": "s1", "template_sha256": "t1"},
    "scorer": {"source_sha256": "r1", "version": "1"},
    "sampling": {"temperature": 0.0, "max_new_tokens": 6, "n": 1},
    "model": {"path": "/m/a"}, "seed": 0, "environment": {"python": "3.11"},
}


@pytest.mark.parametrize("field,value", [
    ("dataset.sha256", "d2"), ("dataset.size", 19), ("prompt.template_sha256", "t2"),
    ("prompt.system_prompt_sha256", "s2"), ("scorer.source_sha256", "r2"), ("scorer.version", "2"),
    ("sampling.temperature", 0.7), ("sampling.max_new_tokens", 8), ("sampling.n", 4), ("split", "train"),
])
def test_locked_room_refuses_each_kind_of_difference(field, value):
    other = json.loads(json.dumps(MANIFEST))
    node = other
    *parents, leaf = field.split(".")
    for key in parents:
        node = node[key]
    before, node[leaf] = node[leaf], value
    diffs = locked_room(MANIFEST, other)
    assert [(d.field, d.a, d.b) for d in diffs] == [(field, before, value)]


def test_locked_room_allows_identical_rooms_with_other_models_and_seeds():
    other = {**MANIFEST, "model": {"path": "/m/b"}, "seed": 3, "environment": {"python": "3.12"}}
    assert locked_room(MANIFEST, other) == []
    missing = {k: v for k, v in MANIFEST.items() if k != "split"}
    assert [(d.field, d.a, d.b) for d in locked_room(MANIFEST, missing)] == [("split", "eval", None)]


def test_compare_same_room_gives_the_paired_numbers(tmp_path, capsys):
    db = tmp_path / "r.db"
    a_right, b_right = set(range(0, 10)), set(range(3, 16))  # B loses 0-2, gains 10-15
    rlab(capsys, "eval", "--completions", frozen(tmp_path / "a.jsonl", a_right), "--db", db, "--name", "A")
    rlab(capsys, "eval", "--completions", frozen(tmp_path / "b.jsonl", b_right), "--db", db, "--name", "B")
    code, out, err = rlab(capsys, "compare", "A", "B", "--db", db, "--json", "--out", tmp_path / "cmp")
    assert code == 0, err
    result = json.loads(out)
    assert result["comparable"] and result["differences"] == []
    paired = result["paired"]
    assert paired["n"] == 20 and paired["difference"] == pytest.approx(0.65 - 0.5)
    assert (paired["gained"], paired["lost"]) == (6, 3)
    assert paired["mcnemar_p"] == pytest.approx(mcnemar_exact(3, 6))
    assert paired["interval"]["low"] < 0.15 < paired["interval"]["high"]
    flipped = {f["example_id"]: f["direction"] for f in paired["flips"]}
    assert flipped == {**{EVAL[i]["id"]: "lost" for i in range(3)},
                       **{EVAL[i]["id"]: "gained" for i in range(10, 16)}}
    saved = json.loads((tmp_path / "cmp" / "summary.json").read_text())
    assert saved["n"] == 20 and saved["pass_at_1"] == {"a": 0.5, "b": 0.65} and "mean_reward" in saved
    code, out, _ = rlab(capsys, "compare", "A", "B", "--db", db)
    assert code == 0 and "same room" in out and "McNemar" in out and "flipped examples" in out


def test_compare_refuses_another_scorer_and_force_shows_numbers_under_a_banner(tmp_path, capsys):
    db = tmp_path / "r.db"
    lenient = tmp_path / "lenient.py"
    lenient.write_text("def correct(example, completion):  # lenient: every answer passes\n    return 1.0\n\nWEIGHTS = {'correct': 1.0}\n")
    rlab(capsys, "eval", "--completions", frozen(tmp_path / "a.jsonl", {1}), "--db", db, "--name", "A")
    rlab(capsys, "eval", "--completions", frozen(tmp_path / "b.jsonl", {1}), "--db", db, "--name", "B",
         "--rewards", lenient)
    code, out, err = rlab(capsys, "compare", "A", "B", "--db", db)
    assert code == 1
    assert "NOT COMPARABLE" in out and "scorer.source_sha256" in out and "McNemar" not in out
    assert err.startswith("rlab: error:") and "scorer.source_sha256" in err and "--force" in err
    code, out, _ = rlab(capsys, "compare", "A", "B", "--db", db, "--force")
    assert code == 0 and "--force" in out and "McNemar" in out
    code, out, _ = rlab(capsys, "compare", "A", "B", "--db", db, "--json")
    result = json.loads(out)
    assert code == 1 and not result["comparable"] and result["paired"] is None
    assert [d["field"] for d in result["differences"]] == ["scorer.source_sha256"]


def test_compare_refuses_another_split_and_subset(tmp_path, capsys):
    db = tmp_path / "r.db"
    rlab(capsys, "eval", "--completions", frozen(tmp_path / "a.jsonl", {1}), "--db", db, "--name", "A")
    rlab(capsys, "eval", "--completions", frozen(tmp_path / "b.jsonl", {1}, count=10), "--db", db, "--name", "B")
    code, out, err = rlab(capsys, "compare", "A", "B", "--db", db, "--json")
    assert code == 1
    assert [d["field"] for d in json.loads(out)["differences"]] == ["dataset.sha256", "dataset.size"]


def test_inspect_lists_the_worst_trajectories(tmp_path, capsys):
    db = tmp_path / "r.db"
    rlab(capsys, "eval", "--completions", frozen(tmp_path / "a.jsonl", set(range(15))), "--db", db,
         "--name", "A")
    code, out, err = rlab(capsys, "inspect", "A", "--db", db, "--only-fails", "--top-k", "50", "--json")
    assert code == 0, err
    rows = json.loads(out)["trajectories"]
    assert len(rows) == 5 and all(r["reward"] < 1 for r in rows)
    assert {r["example_id"] for r in rows} == {ex["id"] for ex in EVAL[15:20]}
    assert all(r["details"]["correct"]["parse_status"] in ("wrong", "malformed") for r in rows)
    code, out, _ = rlab(capsys, "inspect", "A", "--db", db, "--top-k", "2", "--out", tmp_path / "ins")
    assert code == 0 and "completion" in out and "parse_status" in out
    assert len((tmp_path / "ins" / "results.jsonl").read_text().splitlines()) == 2
    code, _, err = rlab(capsys, "inspect", "nope", "--db", db)
    assert code == 2 and "no run named" in err


def test_old_runs_migrate_to_kind_train(tmp_path):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    from rlab.store.migrations import MIGRATIONS
    for statement in [s for version in MIGRATIONS[:5] for s in version]:
        conn.execute(statement)
    conn.execute("INSERT INTO runs (name, scenario, status, created_at) VALUES ('old', 'arithmetic', "
                 "'finished', 1.0)")
    conn.execute("PRAGMA user_version = 5")
    conn.commit()
    conn.close()
    open_db(path).close()
    with StoreReader(path) as reader:
        run = reader.run_by_name("old")
        assert run["kind"] == "train" and run["summary"] == {}


def test_select_pass_at_k_agrees_with_the_stored_trajectories(tmp_path, capsys, raw_tiny_model_dir):
    db = tmp_path / "r.db"
    parity = tmp_path / "parity.py"  # passes about half of the random model's completions
    parity.write_text("def even(example, completion):\n    return float(len(completion) % 2 == 0)\n\n"
                      "WEIGHTS = {'even': 1.0}\n")
    code, out, err = rlab(capsys, "select", "-n", 6, "--k", "1,2,6", "--limit", 8, "--model", raw_tiny_model_dir,
                          "--rewards", parity, "--success", "even", "--db", db, "--name", "S",
                          "--out", tmp_path / "sel", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["model_changed"] is False and "did not change" in summary["note"]
    results = [json.loads(line) for line in (tmp_path / "sel" / "results.jsonl").read_text().splitlines()]
    assert len(results) == 48
    by_example: dict = {}
    for r in results:
        by_example.setdefault(r["example_id"], []).append(r["reward"] >= 1)
    for k in (1, 2, 6):
        expected = sum(pass_at_k(6, sum(v), k) for v in by_example.values()) / 8
        assert summary["pass_at_k"][str(k)] == pytest.approx(expected)
    assert summary["selection_gap"] == pytest.approx(summary["pass_at_k"]["6"] - summary["pass_at_k"]["1"])
    assert summary["best_of_n"]["pass_rate"] == pytest.approx(summary["pass_at_k"]["6"])
    saved = json.loads((tmp_path / "sel" / "summary.json").read_text())
    assert saved["pass_at_k"] == summary["pass_at_k"] and saved["run"]["kind"] == "select"
    code, _, err = rlab(capsys, "select", "-n", 2, "--k", "4", "--model", raw_tiny_model_dir, "--db", db)
    assert code == 2 and "1 <= k <= N = 2" in err


def test_eval_of_a_checkpoint_and_of_its_base_model_share_a_room(tmp_path, capsys, raw_tiny_model_dir):
    db = tmp_path / "r.db"
    code, _, err = rlab(capsys, "run", "--headless", "--model", raw_tiny_model_dir, "--db", db, "--name", "T",
                        "--max-steps", 2, "--prompts-per-step", 2, "--group-size", 2, "--eval-size", 4,
                        "--checkpoint-every", 2, "--eval-every", 100)
    assert code == 0, err
    # An untrained model earns no reward, so its update is zero: alter the
    # checkpoint's weights so that evaluating it visibly loads them.
    checkpoint = tmp_path / "rlab_runs" / "r.db" / "T" / "checkpoints" / "step-000002" / "model"
    model = AutoModelForCausalLM.from_pretrained(checkpoint)
    with torch.no_grad():
        model.lm_head.weight.mul_(-1.0)
    model.save_pretrained(checkpoint)
    transformers_logging.enable_progress_bar()  # as in a fresh process (a run in this one turned the bars off)
    code, out, err = rlab(capsys, "eval", "--checkpoint", "T@2", "--n", 12, "--db", db, "--name", "ckpt", "--json")
    assert code == 0, err
    assert "Loading weights" not in err  # issue 47, 4: the report, not transformers' progress bars
    code, out, err = rlab(capsys, "eval", "--model", raw_tiny_model_dir, "--n", 12, "--db", db, "--name", "base",
                          "--json")
    assert code == 0, err
    with StoreReader(db) as reader:
        manifest = reader.run_by_name("ckpt")["manifest"]
        assert manifest["model"]["checkpoint"]["step"] == 2 and manifest["model"]["checkpoint"]["run"] == "T"
        assert manifest["model"]["weights_sha256"] == sha256_files(checkpoint)
        assert manifest["model"]["weights_sha256"] != reader.run_by_name("base")["manifest"]["model"]["weights_sha256"]
        completions = [[t["completion"] for g in reader.groups_of_step(reader.run_by_name(name)["id"], 0)
                        for t in reader.group(g["id"])["trajectories"]] for name in ("ckpt", "base")]
        assert completions[0] != completions[1]
        assert [r["kind"] for r in reader.runs()] == ["train", "eval", "eval"]
    code, out, err = rlab(capsys, "compare", "base", "ckpt", "--db", db, "--json")
    assert code == 0, err
    assert json.loads(out)["paired"]["n"] == 12
    code, out, err = rlab(capsys, "compare", "T", "ckpt", "--db", db, "--json")
    assert code == 1 and "sampling.temperature" in err
    code, _, err = rlab(capsys, "eval", "--checkpoint", "T@7", "--db", db)
    assert code == 2 and "no checkpoint at step 7" in err and "its checkpoints: 2" in err
    code, _, err = rlab(capsys, "eval", "--checkpoint", "T@x", "--db", db)
    assert code == 2 and "must be a number" in err


def test_eval_of_a_checkpoint_measures_the_task_its_run_trained_on(tmp_path, capsys, raw_tiny_model_dir):
    """Issue 47, 1.1: a checkpoint of a --task run was scored on arithmetic (the default
    scenario); its run's task, success rule and length now decide, and another task is refused."""
    task_dir = Path(__file__).resolve().parents[1] / "examples" / "tasks" / "addition_trl"
    db = tmp_path / "r.db"
    code, _, err = rlab(capsys, "run", "--headless", "--task", task_dir, "--model", raw_tiny_model_dir, "--db", db,
                        "--name", "T", "--max-steps", 2, "--prompts-per-step", 2, "--group-size", 2,
                        "--eval-size", 4, "--checkpoint-every", 2, "--max-new-tokens", 5)
    assert code == 0, err
    code, out, err = rlab(capsys, "eval", "--checkpoint", "T@2", "--n", 4, "--db", db, "--name", "ckpt", "--json")
    assert code == 0, err
    with StoreReader(db) as reader:
        trained, measured = reader.run_by_name("T"), reader.run_by_name("ckpt")
    assert measured["scenario"] == trained["scenario"] == "addition_trl"
    assert measured["manifest"]["dataset"]["size"] == 4 and measured["config"]["task"] == trained["config"]["task"]
    assert measured["config"]["max_new_tokens"] == 5
    code, _, err = rlab(capsys, "eval", "--checkpoint", "T@2", "--scenario", "arithmetic", "--db", db)
    assert code == 2 and "--scenario arithmetic: checkpoint T@2 was trained on task" in err and "drop --scenario" in err


def test_frozen_eval_of_a_user_task_scores_its_own_split(tmp_path, capsys):
    from rlab.scenarios.task_file import load_task

    task_dir = Path(__file__).resolve().parents[1] / "examples" / "tasks" / "addition_trl"
    held_out = load_task(str(task_dir)).eval_examples()[:10]
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"example_id": ex["id"], "completion": str(ex["answer"]) if i < 7 else "x"})
                            + "\n" for i, ex in enumerate(held_out)))
    code, out, err = rlab(capsys, "eval", "--task", str(task_dir), "--completions", path, "--db", tmp_path / "r.db",
                          "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["n"] == 10 and summary["pass_at_1"] == 0.7
