"""User tasks from task.toml: data formats, the held-out split, and the error messages."""

from __future__ import annotations

import json
import textwrap

import datasets
import pytest

from rlab.scenarios import get_scenario
from rlab.scenarios.task_file import load_task
from rlab.scenarios.task_scenario import TaskError, TaskScenario

ROWS = [{"question": f"{a}+{a}=", "solution": str(2 * a), "level": a % 3} for a in range(20)]
REWARDS = "def correct(completions, solution, **kwargs):\n    return [float(c == s) for c, s in zip(completions, solution)]\n"


def _write_task(folder, data_name="train.jsonl", extra="", rows=ROWS):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / data_name
    if data_name.endswith(".jsonl"):
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif data_name.endswith(".csv"):
        datasets.Dataset.from_list(rows).to_csv(str(path), index=False)
    elif data_name.endswith(".parquet"):
        datasets.Dataset.from_list(rows).to_parquet(str(path))
    else:
        datasets.Dataset.from_list(rows).save_to_disk(str(path))
    (folder / "rewards.py").write_text(REWARDS)
    (folder / "task.toml").write_text(textwrap.dedent(f"""\
        train = "{data_name}"
        prompt_field = "question"
        answer_field = "solution"
        rewards = "rewards.py"
        system_prompt = "Add."
        max_new_tokens = 5
    """) + extra)
    return folder


@pytest.mark.parametrize("data_name", ["train.jsonl", "train.csv", "train.parquet", "train_saved"])
def test_every_data_format_loads_with_a_seeded_held_out_split(tmp_path, data_name):
    task = load_task(_write_task(tmp_path / "t", data_name))
    assert isinstance(task, TaskScenario) and not task.multi_step and task.name == "t"
    assert task.dataset_info["held_out"] == "10% of train, seed 20250521"
    held = task.eval_examples()
    train = task.train_examples(seed=0)
    assert len(held) == 2 and len(train) == 18
    assert {ex["id"] for ex in held}.isdisjoint(ex["id"] for ex in train)  # ids are row numbers
    ex = held[0]
    # CSV columns are typed by datasets (here "4" reads as 4), as in any datasets pipeline
    assert ex["prompt"] == ROWS[ex["id"]]["question"] and str(ex["answer"]) == ROWS[ex["id"]]["solution"]
    assert ex["level"] == ROWS[ex["id"]]["level"]  # every other column reaches the rewards
    assert load_task(tmp_path / "t" / "task.toml").eval_examples() == held  # same split every time


def test_eval_file_id_field_and_chat_prompts(tmp_path):
    folder = _write_task(tmp_path / "chat", extra='eval = "eval.jsonl"\nid_field = "uid"\n',
                         rows=[{"uid": f"u{i}", "question": [{"role": "user", "content": f"{i}+{i}="}],
                                "solution": str(2 * i)} for i in range(3)])
    (folder / "eval.jsonl").write_text(json.dumps({"uid": "e1", "question": "1+1=", "solution": "2"}) + "\n")
    task = get_scenario(str(folder))
    assert task.dataset_info["held_out"] is None and [e["id"] for e in task.eval_examples()] == ["e1"]
    assert sorted(e["id"] for e in task.train_examples(0)) == ["u0", "u1", "u2"]
    assert task.train[0]["prompt"] == [{"role": "user", "content": "0+0="}]


@pytest.mark.parametrize("extra, message", [
    ('trian = "x.jsonl"\n', "unknown key 'trian'"),
    ('eval = "nope.jsonl"\n', "eval = 'nope.jsonl': no such file"),
    ('id_field = "uid"\n', "id_field = 'uid', but train has no such column; its columns: question, solution, level"),
    ('max_new_tokens = 0\n', "max_new_tokens"),
])
def test_task_errors_name_the_key_or_list_the_columns(tmp_path, extra, message):
    folder = _write_task(tmp_path / "bad")
    toml = folder / "task.toml"
    toml.write_text(toml.read_text().replace("max_new_tokens = 5\n", "") + extra)
    with pytest.raises(TaskError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_task(folder)


def test_missing_prompt_column_and_unknown_format(tmp_path):
    folder = _write_task(tmp_path / "p", rows=[{"q": "1", "solution": "1"}, {"q": "2", "solution": "2"}])
    with pytest.raises(TaskError, match="prompt_field = 'question', but train has no such column; its columns: q, solution"):
        load_task(folder)
    (folder / "train.txt").write_text("x")
    toml = folder / "task.toml"
    toml.write_text(toml.read_text().replace("train.jsonl", "train.txt"))
    with pytest.raises(TaskError, match=r"unknown data format '.txt'; use .jsonl, .json, .csv, .parquet"):
        load_task(folder)
    with pytest.raises(TaskError, match="no task.toml there"):
        load_task(tmp_path / "empty.toml")
