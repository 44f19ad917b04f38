"""User tasks from task.toml: data formats, the held-out split, and the error messages."""

from __future__ import annotations

import json
import re
import subprocess
import sys
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


# ---- data files a newcomer or a fuzzer gets wrong (issue 33) ---------------------------------------


def _task_with(tmp_path, name: str, text: str):
    (tmp_path / name).write_text(text)
    (tmp_path / "rewards.py").write_text("def r(example, completion):\n    return 1.0\n")
    (tmp_path / "task.toml").write_text(f'train = "{name}"\nrewards = "rewards.py"\n')
    return tmp_path / "task.toml"


@pytest.mark.parametrize("name, text, message", [
    ("train.jsonl", '{"prompt": "a", "answer": "1"}\n{"prompt": "b", "answer": "2"}\n{"prompt": "c" "answer": "3"}\n',
     "train = train.jsonl: cannot read it (line 3: JSON parse error: Missing a comma"),
    ("train.csv", 'prompt,answer\n"a,1\n', "train = train.csv: cannot read it (Error tokenizing data. C error: EOF inside string"),
    ("train.jsonl", "", "train = train.jsonl has no rows"),
    ("train.csv", "prompt,answer\n", "train = train.csv: it has no rows"),
])
def test_a_data_file_that_does_not_parse_is_named_with_the_parsers_reason_and_line(tmp_path, name, text, message):
    with pytest.raises(TaskError, match=re.escape(message)):
        load_task(_task_with(tmp_path, name, text))


def test_a_prompt_too_long_for_any_model_is_refused_before_the_tokenizer_sees_it(tmp_path):
    rows = [{"prompt": "1+1=", "answer": "2"}, {"prompt": "x" * 200_000, "answer": "2"}]
    toml = _task_with(tmp_path, "train.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(TaskError, match=r"train row 1: the prompt is 200,000 characters; the limit is 100,000"):
        load_task(toml)


def test_a_reward_file_that_does_not_parse_is_named_before_the_data_is_read(tmp_path):
    toml = _task_with(tmp_path, "train.jsonl", "not json at all\n")
    (tmp_path / "rewards.py").write_text("def r(example, completion:\n    return 1.0\n")
    with pytest.raises(TaskError, match=r"rewards = rewards.py: line 1: SyntaxError"):
        load_task(toml)


def test_a_data_file_that_does_not_parse_prints_nothing_but_the_error(tmp_path):
    """Issue 40: datasets logged its own "Failed to load JSON from file ..." / "Failed to read
    schema ..." line on stderr before the one error line. In a process of its own: datasets' log
    handler writes to the stderr of its import, which pytest's capture does not see."""
    tasks = []
    for name, data in (("train.jsonl", b'{"prompt": "a", "answer": "1"}\n{"prompt": bad}\n'),
                       ("train.parquet", b"PAR1 this is not a parquet file")):
        folder = tmp_path / name.split(".")[1]
        folder.mkdir()
        tasks.append(str(_task_with(folder, name, "")))
        (folder / name).write_bytes(data)
    code = ("import sys\nfrom rlab.scenarios.task_file import load_task\nfrom rlab.scenarios.task_scenario import "
            "TaskError\nfor task in sys.argv[1:]:\n    try:\n        load_task(task)\n    except TaskError as err:\n"
            "        print(err)\n")
    result = subprocess.run([sys.executable, "-P", "-c", code, *tasks], capture_output=True, text=True, timeout=120)
    assert result.stderr == ""
    assert [line.split(": cannot read it")[0] for line in result.stdout.splitlines()] == [
        f"{tasks[0]}: train = train.jsonl", f"{tasks[1]}: train = train.parquet"]


def test_too_few_prompts_for_a_step_names_the_task_not_the_default_scenario(tmp_path, capsys):
    """Issue 40: a task with 4 training rows said "scenario 'arithmetic' has 4 training prompts"."""
    from rlab.engine.cli.main import main

    rows = "".join(json.dumps({"id": i, "prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n" for i in range(5))
    toml = _task_with(tmp_path, "train.jsonl", rows)
    assert main(["run", "--headless", "--task", str(toml), "--db", str(tmp_path / "r.db")]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line == (f"rlab: error: --prompts-per-step 32: task {tmp_path.name!r} has 4 training prompts; "
                    "pass at most 4")


def test_duplicate_example_ids_are_refused_with_both_rows(tmp_path):
    """Issue 47, 6: 50 rows of one id were accepted silently (their groups, results and
    compare pairs would all share it)."""
    rows = "".join(json.dumps({"id": "same" if i in (3, 7) else f"r{i}", "prompt": f"{i}+1=", "answer": str(i + 1)})
                   + "\n" for i in range(10))
    toml = _task_with(tmp_path, "train.jsonl", rows)
    with pytest.raises(TaskError, match="train rows 3 and 7 have the same id 'same'; ids must be unique"):
        load_task(str(toml))
