"""User tasks run end to end: the shipped examples, run files, user environments, third-party tasks."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlab.engine.run.config import RunConfig
from rlab.engine.step import run
from rlab.scenarios import get_scenario
from rlab.scenarios.task_scenario import TaskError
from rlab.store.reader import StoreReader

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "tasks"
SMALL = dict(max_steps=2, prompts_per_step=2, group_size=3, eval_size=3, eval_every=100, checkpoint_every=100)


def _rlab(*args, cwd):
    return subprocess.run([sys.executable, "-P", "-m", "rlab.engine.cli", *args], capture_output=True, text=True,
                          timeout=240, cwd=cwd)


@pytest.mark.e2e
def test_jsonl_task_with_trl_rewards_runs_headless_and_logs_the_styles(tmp_path, raw_tiny_model_dir):
    db = tmp_path / "r.db"
    result = _rlab("run", "--headless", "--task", str(EXAMPLES / "addition_trl"), "--model", str(raw_tiny_model_dir),
                   "--db", str(db), "--max-steps", "2", "--prompts-per-step", "2", "--group-size", "3",
                   "--eval-size", "4", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "correct [TRL f(completions, **kwargs)]" in result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    with StoreReader(db) as reader:
        row = reader.run(summary["run_id"])
        assert row["scenario"] == "addition_trl"
        manifest = row["manifest"]
        assert manifest["dataset"]["held_out"] == "10% of train, seed 20250521"
        assert manifest["config"]["max_new_tokens"] == 5  # the task's default (RunConfig says 6)
        groups = reader.groups_of_step(summary["run_id"], 1)
        group = reader.group(groups[0]["id"])
    components = group["trajectories"][0]["components"]
    assert set(components) == {"correct", "three_digit_bonus", "numeric"}


@pytest.mark.e2e
def test_run_file_with_an_inline_task_and_flags_over_it(tmp_path, raw_tiny_model_dir):
    task = tmp_path / "mytask"
    shutil.copytree(EXAMPLES / "addition_trl", task)
    (tmp_path / "run.toml").write_text(textwrap.dedent(f"""\
        model = "{raw_tiny_model_dir}"
        max_steps = 5
        prompts_per_step = 2
        group_size = 3
        eval_size = 3
        temperature = 0.9
        [task]
        name = "inline"
        train = "mytask/train.jsonl"
        rewards = "mytask/rewards.py"
        max_new_tokens = 4
    """))
    db = tmp_path / "r.db"
    result = _rlab("run", "--headless", "--config", "run.toml", "--max-steps", "1", "--db", str(db), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["steps"] == 1  # the flag beat the file's max_steps = 5
    with StoreReader(db) as reader:
        config = reader.run(summary["run_id"])["manifest"]["config"]
    assert config["temperature"] == 0.9 and config["max_new_tokens"] == 4
    assert config["task"]["train"] == str(task / "train.jsonl")  # resolved against the run file


@pytest.mark.parametrize("text, message", [
    ("max_stepz = 3\n", "unknown key(s) 'max_stepz'"),
    ("max_steps = \n", "not valid TOML"),
    ('task = "nowhere"\n', "no task.toml there"),
])
def test_run_file_errors_are_one_line(tmp_path, text, message):
    (tmp_path / "run.toml").write_text(text)
    result = _rlab("run", "--headless", "--config", "run.toml", "--db", str(tmp_path / "r.db"), cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("rlab: error: ") and message in result.stderr
    assert "Traceback" not in result.stderr


def test_user_env_runs_through_the_multi_turn_engine_with_anchor_states(tmp_path, raw_tiny_model_dir):
    db = tmp_path / "env.db"
    summary = run(RunConfig(task=str(EXAMPLES / "guess_env"), model=raw_tiny_model_dir, db=db, advantage="gigpo",
                            **SMALL))
    assert summary["status"] == "finished"
    with StoreReader(db) as reader:
        group = reader.group(reader.groups_of_step(summary["run_id"], 1)[0]["id"])
        trajectory = reader.trajectory(group["trajectories"][0]["id"])
    assert trajectory["messages"][0]["role"] == "system"
    assert trajectory["messages"][1]["content"] == "1..31?"
    turns = trajectory["turns"]
    assert 1 <= len(turns) <= 6 and turns[0]["state_key"] == "(1, 31)"
    assert group["initial_state_key"] == "(1, 31)"


def test_user_env_seed_fixes_the_group_start_and_invalid_actions_are_flagged():
    task = get_scenario(str(EXAMPLES / "guess_env"))
    assert task.multi_step and task.max_turns == 6
    example = task.train_examples(0)[0]
    envs = [task.make_env(example) for _ in range(3)]
    starts = [env.reset(example) for env in envs]
    assert all(s == starts[0] for s in starts)
    secrets = {env.env.secret for env in envs}
    assert len(secrets) == 1
    observation, reward, done, key = envs[0].step("banana")
    assert envs[0].invalid and reward == 0.0 and not done and key == (1, 31)
    observation, reward, done, key = envs[0].step(str(secrets.pop()))
    assert reward == 1.0 and done and not envs[0].invalid


def test_env_errors_name_the_class(tmp_path):
    folder = tmp_path / "e"
    shutil.copytree(EXAMPLES / "guess_env", folder)
    toml = folder / "task.toml"
    toml.write_text(toml.read_text().replace("env.py:GuessEnv", "env.py:Nope"))
    with pytest.raises(TaskError, match="defines no class 'Nope'; classes there: GuessEnv"):
        get_scenario(str(folder))


def test_reasoning_gym_task_scores_with_the_datasets_own_score_answer():
    pytest.importorskip("reasoning_gym")
    from rlab.engine.rewards.rubric import load_rubric

    task = get_scenario("reasoning-gym:basic_arithmetic")
    assert len(task.train_examples(0)) == 2000 and len(task.eval_examples()) == 200
    example = task.eval_examples()[0]
    rubric = load_rubric(task.reward_file)
    right, wrong, untagged = rubric.score_group(
        [example] * 3, [f"<answer>{example['answer']}</answer>", "<answer>nope</answer>", example["answer"]])
    assert right.components == {"correct": 1.0, "answer_tag": 1.0}
    assert wrong.components == {"correct": 0.0, "answer_tag": 1.0}
    assert untagged.components["answer_tag"] == 0.0 and untagged.details["parse_status"] == "no_answer_tag"
    with pytest.raises(TaskError, match="no such dataset; some that exist"):
        get_scenario("reasoning-gym:no_such_thing")


def test_reasoning_gym_task_file_sets_the_generator_config_and_its_own_rewards():
    pytest.importorskip("reasoning_gym")
    from rlab.engine.rewards.rubric import load_rubric

    task = get_scenario(str(EXAMPLES / "reasoning_gym_arithmetic"))
    train = task.train_examples(0)
    # the shipped config: two one-digit terms, + and - only, no parentheses
    assert all(ex["metadata"]["num_terms"] == 2 and "(" not in ex["prompt"] for ex in train)
    assert {op for ex in train for op in "+-*/" if f" {op} " in ex["prompt"]} == {"+", "-"}
    assert task.dataset_info["config"]["operators"] == ["+", "-"] and task.max_new_tokens == 24
    assert task.system_prompt.startswith("Answer with the result only")
    assert task.reward_file == EXAMPLES / "reasoning_gym_arithmetic" / "rewards.py"
    example = next(ex for ex in train if ex["answer"] != "7")
    rubric = load_rubric(task.reward_file)
    tagged, last, wrong = rubric.score_group(
        [example] * 3, [f"<answer>{example['answer']}</answer>", f"so 3 + 4 = 7, and here {example['answer']}",
                        "7"])
    assert tagged.reward == pytest.approx(1.1) and last.reward == pytest.approx(1.0) and wrong.reward == 0.0
    assert last.details["parse_status"] == "last_number"


def test_reasoning_gym_task_file_errors_name_the_setting(tmp_path):
    pytest.importorskip("reasoning_gym")
    toml = tmp_path / "task.toml"
    toml.write_text('reasoning_gym = "basic_arithmetic"\nconfig = { max_digitz = 1 }\n')
    with pytest.raises(TaskError, match=r"bad config .*max_digitz.*its settings are: min_terms, max_terms"):
        get_scenario(str(tmp_path))
    toml.write_text('reasoning_gym = "basic_arithmetic"\ntrain = "t.jsonl"\n')
    with pytest.raises(TaskError, match=r"unknown key 'train' \(known keys: reasoning_gym, config"):
        get_scenario(str(tmp_path))
    toml.write_text('reasoning_gym = "basic_arithmetic"\nrewards = "nope.py"\n')
    with pytest.raises(TaskError, match=r"rewards = 'nope.py': no such file"):
        get_scenario(str(tmp_path))


def test_missing_extras_say_what_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("reasoning_gym", "verifiers") else real(name, *a))
    with pytest.raises(TaskError, match=r"needs the reasoning-gym package; install it with: pip install -c constraints.txt 'rollout-lab\[tasks\]'"):
        get_scenario("reasoning-gym:basic_arithmetic")
    with pytest.raises(TaskError, match=r"needs the verifiers package"):
        get_scenario("verifiers:my_env")


VERIFIERS_ENV = '''
import datasets
import verifiers as vf


def load_environment():
    rows = [{"question": f"{i}*2?", "answer": str(2 * i), "info": {"i": i}} for i in range(30)]
    parser = vf.XMLParser(fields=["answer"], answer_field="answer")

    def correct_answer(completion, answer, parser, **kwargs) -> float:
        return 1.0 if parser.parse_answer(completion) == answer else 0.0

    rubric = vf.Rubric(funcs=[correct_answer, parser.get_format_reward_func()], weights=[1.0, 0.25],
                       parser=parser)
    return vf.SingleTurnEnv(dataset=datasets.Dataset.from_list(rows), system_prompt="Answer in <answer> tags.",
                            parser=parser, rubric=rubric)
'''


def test_verifiers_environment_from_load_environment(tmp_path):
    """A real verifiers 0.1.x SingleTurnEnv (its RubricGroup, XMLParser and format reward)."""
    pytest.importorskip("verifiers", reason="verifiers not installed: pip install 'rollout-lab[tasks]'")
    from rlab.engine.rewards.rubric import load_rubric
    from rlab.engine.rewards.signatures import style_of

    module = tmp_path / "toy_vf_env.py"
    module.write_text(VERIFIERS_ENV)
    task = get_scenario(f"verifiers:{module}")
    assert task.system_prompt == "Answer in <answer> tags." and task.dataset_info["held_out"].startswith("10%")
    rubric = load_rubric(task.reward_file)
    # the monitor rubric's weight-0 num_turns metric is not a reward
    assert rubric.weights == {"correct_answer": 1.0, "format_reward_func": 0.25}
    assert {style_of(f) for f in rubric.functions.values()} == {"verifiers"}
    example = task.train_examples(0)[0]
    right, wrong = rubric.score_group([example, example], [f"<answer>{example['answer']}</answer>", "no idea"])
    assert right.error is None and right.reward == pytest.approx(1.25)
    assert wrong.error is None and wrong.components["correct_answer"] == 0.0 and wrong.reward < 0.25


def test_the_tui_names_a_task_run_after_the_task_before_loading_it():
    from rlab.engine.cli.run import task_label as _task_label

    assert _task_label(str(EXAMPLES / "reasoning_gym_arithmetic" / "task.toml")) == "reasoning_gym_arithmetic"
    assert _task_label("examples/tasks/addition_trl") == "addition_trl"
    assert _task_label("reasoning-gym:chain_sum") == "chain_sum"
    assert _task_label("verifiers:/home/me/envs/my_env.py") == "my_env"
    assert _task_label({"reasoning_gym": "countdown"}) == "countdown"
    assert _task_label(None) is None
