"""Success is declared, not inferred: pass@1 counts the task's success function, never the total reward.

The rubric below is the hack-prone one of issue 29 (an exact answer, a
bonus for mentioning a word, a brevity reward): a wrong one-character answer
that mentions the word earns 1.5, so "total reward >= 1" calls it solved.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlab.engine.rewards.rubric import load_rubric
from rlab.engine.rewards.score_result import ScoreResult
from rlab.engine.rollout.play import held_out
from rlab.engine.rewards.success import SuccessError, SuccessRule
from rlab.scenarios import builtin_scenarios, get_scenario
from rlab.store.reader import StoreReader

HACKABLE = '''
def exact(example, completion):
    return 1.0 if completion.strip() == example["answer"] else 0.0

def mentions_seven(example, completion):
    return 1.0 if "7" in completion else 0.0

def brevity(example, completion):
    return 1.0 if len(completion.strip()) <= 4 else 0.0

WEIGHTS = {"exact": 1.0, "mentions_seven": 0.5, "brevity": 1.0}
'''


def hack_task(folder: Path, *, success: str | None = "exact") -> Path:
    """A user task: arithmetic's problems, the hack-prone rubric, ``success`` declared (or not)."""
    arithmetic = get_scenario("arithmetic")
    folder.mkdir()
    for name, rows in (("train.jsonl", arithmetic.train_examples(0)[:400]), ("eval.jsonl", arithmetic.eval_examples()[:40])):
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "rewards.py").write_text(HACKABLE)
    declared = f'success = "{success}"\n' if success else ""
    (folder / "task.toml").write_text(f'train = "train.jsonl"\neval = "eval.jsonl"\nrewards = "rewards.py"\n'
                                      f"{declared}max_new_tokens = 4\n")
    return folder


def test_a_success_function_decides_not_the_total():
    rubric = load_rubric(HACKABLE)
    example = {"answer": "48"}
    hacked, right = rubric.score_group([example, example], ["7", "48"])
    assert hacked.reward == 1.5 and right.reward == 2.0  # both "pass" by the total
    rule = SuccessRule("exact")
    assert (rule.passed(hacked), rule.passed(right)) == (False, True)
    assert SuccessRule().passed(hacked) is True  # the old rule, a reward hack counted as solved
    figures = held_out([hacked, hacked, right], rule)
    assert figures.pass_at_1 == pytest.approx(1 / 3) and figures.components["exact"] == pytest.approx(1 / 3)
    assert figures.reward == pytest.approx(5 / 3)


def test_no_verdict_is_not_a_failure_and_a_threshold_is_the_tasks():
    errored = ScoreResult(reward=0.0, components={"exact": 0.0}, details={}, error="exact: ValueError")
    half = ScoreResult(reward=0.5, components={"exact": 0.5}, details={})
    assert SuccessRule("exact").passed(errored) is None
    assert SuccessRule("exact", 0.5).passed(half) and not SuccessRule("exact").passed(half)
    assert SuccessRule("exact").label == "exact >= 1" and SuccessRule().label == "total reward >= 1"


def test_a_success_function_the_rubric_lacks_is_refused_with_the_fix():
    with pytest.raises(SuccessError, match="success = 'exakt' is not a reward function .*exact, mentions_seven"
                                          ".*--success NAME"):
        SuccessRule("exakt").check(load_rubric(HACKABLE).weights)
    assert "declare one in task.toml" in SuccessRule().warning(load_rubric(HACKABLE).weights)
    assert SuccessRule("exact").warning(load_rubric(HACKABLE).weights) is None


@pytest.mark.parametrize("name", builtin_scenarios())
def test_every_built_in_scenario_declares_a_success_function_its_rubric_has(name):
    scenario = get_scenario(name)
    assert scenario.success is not None
    SuccessRule.of(scenario).check(load_rubric(scenario.reward_file).weights)


def _run(tmp_path: Path, task: Path, model: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-P", "-m", "rlab.engine.cli", "run", "--headless", "--task", str(task),
                           "--model", str(model), "--db", str(tmp_path / "s.db"), "--max-steps", "2",
                           "--prompts-per-step", "4", "--group-size", "4", "--eval-every", "2", *extra],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)


@pytest.mark.e2e
def test_a_user_task_reports_pass_at_1_from_its_success_function_only(tmp_path, raw_tiny_model_dir):
    """The untrained model writes short gibberish: brevity pays for most of it, exact for none."""
    done = _run(tmp_path, hack_task(tmp_path / "task"), raw_tiny_model_dir, "--name", "declared")
    assert done.returncode == 0, done.stderr
    assert "declares no success function" not in done.stderr
    reader = StoreReader(tmp_path / "s.db")
    run = reader.run_by_name("declared")
    evals = [m for m in reader.step_metrics(run["id"]) if m.get("eval/pass_at_1") is not None]
    assert len(evals) == 2  # before training and at step 2
    for m in evals:  # pass@1 is exact's share: exact is 0 or 1, so it equals exact's mean
        assert m["eval/pass_at_1"] == pytest.approx(m["eval/rewards/exact/mean"])
        assert m["eval/reward"] > m["eval/pass_at_1"]
    trajectories = [t for step in (1, 2) for g in reader.groups_of_step(run["id"], step)
                    for t in (reader.group(g["id"]) or {"trajectories": []})["trajectories"]]
    assert [bool(t["success"]) for t in trajectories] == [t["components"]["exact"] >= 1 for t in trajectories]
    assert any(t["reward"] >= 1 and not t["success"] for t in trajectories)  # the total would have passed these
    assert run["config"]["success"] == "exact" and run["manifest"]["scorer"]["success"] == "exact >= 1"


@pytest.mark.e2e
def test_without_a_declaration_a_warning_says_pass_at_1_is_the_total(tmp_path, raw_tiny_model_dir):
    done = _run(tmp_path, hack_task(tmp_path / "task", success=None), raw_tiny_model_dir, "--name", "inferred")
    assert done.returncode == 0, done.stderr
    assert "rlab: warning: this task declares no success function, so pass@1 = total reward >= 1" in done.stderr
    reader = StoreReader(tmp_path / "s.db")
    run = reader.run_by_name("inferred")
    assert [e["kind"] for e in reader.events(run["id"])][0] == "warning"
    first = reader.step_metrics(run["id"])[0]
    assert first["eval/pass_at_1"] > first["eval/rewards/exact/mean"]  # brevity + the bonus count as solved
    again = _run(tmp_path, tmp_path / "task", raw_tiny_model_dir, "--name", "flag", "--success", "exact")
    assert again.returncode == 0, again.stderr
    assert "declares no success function" not in again.stderr
