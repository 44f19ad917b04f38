"""The lab's attachment to a TRL GRPOTrainer, on one process and without TRL.

A stand-in trainer has what the attachment touches (the four reward lists,
``_logs`` and ``_metrics`` as GRPOTrainer keeps them); a generation is
played the way ``GRPOTrainer._calculate_rewards`` calls the reward functions
and logs the batch. Covered here: version 1 written out as a reward file,
the reward slots (version 1 called exactly as TRL calls it, edited versions
scored in the lab's scoring process, stale columns dropped), and the
callback's step: the batch stored once with its examples, pause / single
step / resume from another thread, a checked edit applied, a bad one
refused with the run going on, stop. The two-process runs under torchrun
are in tests/test_trl_attach_live.py.
"""

from __future__ import annotations

import textwrap
import threading
import time
from collections import defaultdict, deque
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from accelerate.scheduler import AcceleratedScheduler

from rlab.engine.integrations.trl import VERSION_ONE_FILE, RlabCallback
from rlab.engine.integrations.trl_ranks import Ranks
from rlab.engine.integrations.trl_rewards import RewardSlot, TrlRewards, functions_source
from rlab.engine.rewards.rubric import load_rubric
from rlab.engine.rewards.scoring_process import RubricVersion
from rlab.engine.run.settings import SettingsError, checked_for_run
from rlab.store.control import send_command
from rlab.store.reader import StoreReader

FIXTURES = Path(__file__).parent / "fixtures" / "trl_attach"

REWARDS_MODULE = '''\
"""A training script's reward functions, with what they need around them."""
import re
import json as _json
from collections import Counter

NUMBER = re.compile(r"-?\\d+")
LIMIT = 3
HEAVY = [i * i for i in range(10)]  # used by nothing below: left out


def _first_number(text):
    found = NUMBER.search(text)
    return found.group() if found else None


def correct(completions, answer, **kwargs):
    return [float(_first_number(c[0]["content"]) == a) for c, a in zip(completions, answer)]


def brief(completions, **kwargs) -> list[float]:
    limit = LIMIT
    return [float(len(c[0]["content"].strip()) <= limit) for c in completions]


def main():
    trainer = None  # the training itself: never part of the reward file
'''


def completion(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


def prompt(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def load_module(tmp_path: Path, source: str = REWARDS_MODULE):
    import importlib.util

    path = tmp_path / "train_script.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("train_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_trainer(funcs, names=None, weights=None):
    """What GRPOTrainer holds that the attachment touches."""
    size = 64
    return SimpleNamespace(
        reward_funcs=list(funcs), reward_func_names=names or [f.__name__ for f in funcs],
        reward_weights=torch.tensor(weights or [1.0] * len(funcs)),
        reward_processing_classes=[None] * len(funcs), model=SimpleNamespace(training=True), accelerator=None,
        beta=0.0,
        _logs={"images": deque(maxlen=size), "prompt": deque(maxlen=size), "completion": deque(maxlen=size),
               "rewards": defaultdict(lambda: deque(maxlen=size)), "advantages": deque(maxlen=size),
               "extra": defaultdict(lambda: deque(maxlen=size))},
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)})


def generate(trainer, prompts: list, completions: list, answers: list[str], **columns) -> torch.Tensor:
    """One generation batch as GRPOTrainer scores and logs it (one process)."""
    kwargs = {"answer": answers, **columns, "trainer_state": None, "log_extra": lambda *a: None,
              "log_metric": lambda *a: None}
    per_func = torch.zeros(len(prompts), len(trainer.reward_funcs))
    for i, func in enumerate(trainer.reward_funcs):
        out = func(prompts=prompts, completions=completions, completion_ids=[[1]] * len(prompts), **kwargs)
        per_func[:, i] = torch.tensor([float("nan") if r is None else r for r in out])
    rewards = (per_func * trainer.reward_weights.unsqueeze(0)).nansum(dim=1)
    grouped = rewards.view(-1, 4)
    advantages = (grouped - grouped.mean(dim=1, keepdim=True)).view(-1)
    for i, name in enumerate(trainer.reward_func_names):
        trainer._metrics["train"][f"rewards/{name}/mean"].append(torch.nanmean(per_func[:, i]).item())
    trainer._metrics["train"]["reward"].append(rewards.mean().item())
    trainer._metrics["train"]["completions/mean_length"].append(3.0)
    trainer._logs["prompt"].extend(prompts)
    trainer._logs["completion"].extend(completions)
    for i, name in enumerate(trainer.reward_func_names):
        trainer._logs["rewards"][name].extend(per_func[:, i].tolist())
    trainer._logs["advantages"].extend(advantages.tolist())
    return per_func


def batch(texts: list[str], question: str = "2+2=", answer: str = "4"):
    return [prompt(question)] * len(texts), [completion(t) for t in texts], [answer] * len(texts)


# -- version 1 as a reward file ----------------------------------------------------------


def test_version_one_is_the_functions_and_what_they_use(tmp_path):
    module = load_module(tmp_path)
    source, why = functions_source({"correct": module.correct, "brief": module.brief},
                                   {"correct": 1.0, "brief": 0.5}, "# header")
    assert why == "" and source.startswith("# header")
    for needed in ("import re", "NUMBER = re.compile", "LIMIT = 3", "def _first_number", "def correct",
                   "def brief", 'WEIGHTS = {"correct": 1.0, "brief": 0.5}'):
        assert needed in source, needed
    for left_out in ("HEAVY", "def main", "import json", "Counter"):
        assert left_out not in source, left_out
    rubric = load_rubric(source, filename=VERSION_ONE_FILE)
    assert rubric.weights == {"correct": 1.0, "brief": 0.5}
    [score] = rubric.score_group([{"prompt": prompt("2+2="), "answer": "4"}], ["4"])
    assert score.components == {"correct": 1.0, "brief": 1.0}


def test_version_one_cannot_be_written_out_from_lambdas_or_closures(tmp_path):
    module = load_module(tmp_path)

    def inner(completions, **kwargs):
        return [0.0] * len(completions)

    assert functions_source({"<lambda>": lambda completions, **k: [0.0]}, {"<lambda>": 1.0})[0] is None
    source, why = functions_source({"inner": inner, "correct": module.correct}, {"inner": 1.0, "correct": 1.0})
    assert source is None and "inside another function" in why


# -- the reward slots ------------------------------------------------------------------------


def test_version_one_calls_the_users_functions_as_trl_does_and_gathers_the_rows():
    calls = []

    def correct(completions, answer, **kwargs):
        calls.append({"completions": completions, "answer": answer, **kwargs})
        return [float(c[0]["content"] == a) for c, a in zip(completions, answer)]

    class RewardModel(torch.nn.Module):  # kept as it is, after the editable functions
        pass

    model = RewardModel()
    trainer = fake_trainer([model, correct], names=["rm", "correct"], weights=[0.5, 2.0])
    rewards = TrlRewards(trainer, Ranks())
    assert [type(f) for f in trainer.reward_funcs] == [RewardSlot, RewardModel]
    assert trainer.reward_func_names == ["correct", "rm"]
    assert trainer.reward_weights.tolist() == [2.0, 0.5]
    prompts, completions, answers = batch(["4", "5", "4", "x"])
    image = object()
    out = trainer.reward_funcs[0](prompts=prompts, completions=completions, completion_ids=[[1]] * 4,
                                  answer=answers, image=[image] * 4, trainer_state="S")
    assert out == [1.0, 0.0, 1.0, 0.0]
    [call] = calls
    assert call["completions"] is completions and call["prompts"] is prompts and call["trainer_state"] == "S"
    assert call["image"] == [image] * 4 and call["completion_ids"] == [[1]] * 4
    pending = rewards.pending
    assert pending is not None and len(pending.rows) == 4 and pending.weights == {"correct": 2.0, "rm": 0.5}
    row = pending.rows[0]
    assert row["example"] == {"prompt": prompt("2+2="), "answer": "4"}  # the image is not JSON: left out
    assert (row["version"], row["rank"], row["error"]) == (1, 0, None)


def test_an_edited_version_scores_in_the_scoring_process_and_drops_stale_columns():
    def correct(completions, answer, **kwargs):
        return [float(c[0]["content"] == a) for c, a in zip(completions, answer)]

    trainer = fake_trainer([correct])
    rewards = TrlRewards(trainer, Ranks())
    generate(trainer, *batch(["4", "5", "4", "x"]))
    source = (FIXTURES / "rewards_v2.py").read_text()
    rubric = RubricVersion(source, {"correct": 1.0, "brief": 0.25, "digits_only": 0.5}, "rewards_v2.py")
    try:
        assert rewards.probe(rubric, [({"prompt": prompt("2+2="), "answer": "4"}, "4")]) is None
        rewards.switch(2, rubric)
        assert trainer.reward_func_names == ["correct", "brief", "digits_only"]
        assert trainer.reward_weights.tolist() == [1.0, 0.25, 0.5]
        per_func = generate(trainer, *batch(["4", "5", "4 apples", "x"]))
        assert per_func.tolist() == [[1, 1, 1], [0, 1, 1], [1, 0, 0], [0, 1, 0]]
        assert set(trainer._logs["rewards"]) == {"correct", "brief", "digits_only"}
        assert {r["version"] for r in rewards.pending.rows} == {2}
        # a version that raises gives 0 and says why, never an exception in the trainer
        raises = RubricVersion((FIXTURES / "rewards_raises.py").read_text(), {"correct": 1.0}, "r.py")
        assert "ZeroDivisionError" in rewards.probe(raises, [({"prompt": "q", "answer": "4"}, "4")])
        rewards.switch(3, raises)
        assert generate(trainer, *batch(["4"] * 4)).tolist() == [[0.0]] * 4
        assert all("ZeroDivisionError" in r["error"] for r in rewards.pending.rows)
    finally:
        rewards.close()


# -- the callback's step ---------------------------------------------------------------------


class Args(SimpleNamespace):
    def to_dict(self):
        return dict(self.__dict__)


def correct(completions, answer, **kwargs):
    """1.0 when the completion is the answer."""
    return [float(c[0]["content"].strip() == a) for c, a in zip(completions, answer)]


def brief(completions, **kwargs):
    """1.0 for at most 3 characters."""
    return [float(len(c[0]["content"].strip()) <= 3) for c in completions]


@pytest.fixture
def attached(tmp_path):
    trainer = fake_trainer([correct, brief])
    callback = RlabCallback(tmp_path / "runs.db", trainer=trainer, success="correct", poll_interval_s=0.02,
                            beat_s=0.1)
    args = Args(output_dir=str(tmp_path / "grpo-out"), learning_rate=1e-5, hub_token="secret")
    state = SimpleNamespace(global_step=0)
    callback.on_train_begin(args, state, None)
    yield SimpleNamespace(trainer=trainer, callback=callback, args=args, state=state, db=tmp_path / "runs.db")
    callback.on_train_end(args, state, None)


def train_step(a, texts=("4", "5", "4", "12345"), question="2+2=", answer="4"):
    """One optimizer step: a generation, then on_step_end (blocks while paused)."""
    generate(a.trainer, *batch(list(texts), question, answer))
    a.state.global_step += 1
    control = SimpleNamespace(should_training_stop=False)
    a.callback.on_step_end(a.args, a.state, control)
    a.callback.on_log(a.args, a.state, control, logs={"loss": 0.5, "reward": 99.0})
    a.trainer._metrics["train"].clear()
    return control


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def test_each_batch_is_stored_once_with_its_examples_metrics_and_version_one(attached):
    train_step(attached)
    attached.state.global_step += 1  # num_iterations > 1: a step on the same batch stores nothing
    attached.callback.on_step_end(attached.args, attached.state, SimpleNamespace(should_training_stop=False))
    train_step(attached, question="3+3=", answer="6", texts=("6", "6", "x", "6"))
    with StoreReader(attached.db) as reader:
        rid = reader.runs()[0]["id"]
        run = reader.run(rid)
        assert reader.steps(rid) == [1, 3]
        group = reader.group(reader.groups_of_step(rid, 1)[0]["id"])
        metrics = {m["step"]: m for m in reader.step_metrics(rid)}
        [version] = reader.reward_versions(rid)
    assert run["config"]["alerts_by"] == "engine" and "hub_token" not in run["config"]
    assert run["config"]["reward_file"].endswith(VERSION_ONE_FILE) and run["config"]["success"] == "correct"
    assert group["example"] == {"prompt": prompt("2+2="), "answer": "4"}
    assert [t["components"] for t in group["trajectories"]][:2] == [{"correct": 1.0, "brief": 1.0},
                                                                    {"correct": 0.0, "brief": 1.0}]
    assert [t["success"] for t in group["trajectories"]] == [1, 0, 1, 0]
    assert {t["reward_version"] for t in group["trajectories"]} == {1}
    assert {t["details"]["rank"] for t in group["trajectories"]} == {0}
    # TRL's own metric wins over the one computed from the groups; the logged loss joins the row
    assert metrics[1]["reward"] == pytest.approx(1.25) and metrics[1]["loss"] == 0.5
    assert metrics[1]["success_rate"] == 0.5 and metrics[3]["success_rate"] == 0.75
    assert "def correct" in version["source"] and version["weights"] == {"correct": 1.0, "brief": 1.0}
    assert Path(run["config"]["reward_file"]).read_text() == version["source"]


def test_pause_single_step_and_resume_from_another_thread(attached):
    train_step(attached)
    rid = attached.callback.run_id
    send_command(attached.db, rid, "pause")
    worker = threading.Thread(target=train_step, args=(attached,))
    worker.start()
    wait_for(lambda: StoreReader(attached.db).run(rid)["status"] == "paused")
    time.sleep(0.3)
    assert worker.is_alive()  # blocked at the end of step 2
    send_command(attached.db, rid, "step")
    worker.join(10)
    assert not worker.is_alive()
    worker = threading.Thread(target=train_step, args=(attached,))  # step 3 runs, then pauses again
    worker.start()
    wait_for(lambda: [e["kind"] for e in StoreReader(attached.db).events(rid)][-1:] == ["pause"])
    assert worker.is_alive()
    send_command(attached.db, rid, "resume")
    worker.join(10)
    with StoreReader(attached.db) as reader:
        events = [(e["step"], e["kind"], e["payload"].get("reason")) for e in reader.events(rid)]
        status = reader.run(rid)["status"]
    assert events == [(2, "pause", "user"), (2, "resume", "single step"), (3, "pause", "single step done"),
                      (3, "resume", "user")]
    assert status == "running"


def test_a_checked_edit_applies_at_the_step_boundary_and_a_bad_one_is_refused(attached):
    train_step(attached)
    rid = attached.callback.run_id
    good = (FIXTURES / "rewards_v2.py").read_text()
    bad = (FIXTURES / "rewards_raises.py").read_text()
    no_success = textwrap.dedent('''
        def brief(completions, **kwargs):
            return [1.0 for _ in completions]
    ''')
    send_command(attached.db, rid, "set_rewards", {"source": bad, "weights": {"correct": 1.0}})
    train_step(attached)
    send_command(attached.db, rid, "set_rewards", {"source": no_success, "weights": {"brief": 1.0}})
    train_step(attached)
    weights = {"correct": 1.0, "brief": 0.25, "digits_only": 0.5}
    send_command(attached.db, rid, "set_rewards", {"source": good, "weights": weights})
    train_step(attached)
    train_step(attached, texts=("4", "4 apples", "x", "4"))
    with StoreReader(attached.db) as reader:
        commands = [(c["status"], c["message"] or "") for c in reader.commands(rid)]
        versions = [(v["version"], v["weights"]) for v in reader.reward_versions(rid)]
        edit = [e for e in reader.events(rid) if e["kind"] == "reward_edit"]
        step5 = reader.group(reader.groups_of_step(rid, 5)[0]["id"])
        step4 = reader.group(reader.groups_of_step(rid, 4)[0]["id"])
    assert commands[0][0] == "rejected" and "ZeroDivisionError" in commands[0][1]
    assert commands[1][0] == "rejected" and "correct" in commands[1][1]  # drops the success function
    assert commands[2] == ("applied", "reward version 2 on 1 processes from step 5")
    assert versions == [(1, {"correct": 1.0, "brief": 1.0}), (2, weights)]
    assert edit[0]["step"] == 4 and edit[0]["payload"]["processes"] == {"0": 2}
    assert {t["reward_version"] for t in step4["trajectories"]} == {1}
    assert [t["reward_version"] for t in step5["trajectories"]] == [2] * 4
    assert [t["components"] for t in step5["trajectories"]][:2] == [
        {"correct": 1.0, "brief": 1.0, "digits_only": 1.0}, {"correct": 1.0, "brief": 0.0, "digits_only": 0.0}]
    assert [t["reward"] for t in step5["trajectories"]][:2] == [1.75, 1.0]  # TRL's weighted sum


def schedule(trainer, wrap=lambda scheduler, optimizer: scheduler):
    """Give the stand-in trainer what Trainer.train() makes: an optimizer at GRPOConfig's rate and
    the linear schedule over 10 steps, one step in (the next update's rate: 9/10 of the peak)."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-5)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: (10 - step) / 10)
    optimizer.step()
    scheduler.step()
    trainer.optimizer, trainer.lr_scheduler = optimizer, wrap(scheduler, optimizer)
    return scheduler


def test_rlab_set_lr_moves_the_schedule_peak_and_the_next_update_and_checks_against_it(attached):
    scheduler = schedule(attached.trainer)
    train_step(attached)
    rid = attached.callback.run_id
    send_command(attached.db, rid, "set_settings", {"changes": {"lr": 3e-5}})
    train_step(attached)
    train_step(attached)
    assert scheduler.base_lrs == [3e-5]
    # the next update's rate, and what the Trainer logs as its learning_rate (get_last_lr)
    assert scheduler.optimizer.param_groups[0]["lr"] == scheduler.get_last_lr()[0] == 3e-5 * (9 / 10)
    with StoreReader(attached.db) as reader:
        commands = [(c["status"], c["message"]) for c in reader.commands(rid)]
        run, events = reader.run(rid), reader.events(rid)
        peaks = {m["step"]: (m["settings/lr"], m["settings/version"]) for m in reader.step_metrics(rid)}
    assert commands == [("applied", "settings version 1 from step 3: lr=3e-05")]
    assert peaks == {1: (1e-5, 0.0), 2: (1e-5, 0.0), 3: (3e-5, 1.0)}
    # rlab set checks against the changes made so far, not the rate the run started with
    assert checked_for_run(run, events, {"lr": "1e-5"}) == {"lr": 1e-5}
    with pytest.raises(SettingsError, match="already has these values"):
        checked_for_run(run, events, {"lr": "3e-5"})


def test_a_scheduler_without_base_rates_is_stored_and_refuses_lr_with_the_reason(attached):
    """DeepSpeed's own scheduler reaches the trainer in accelerate's wrapper, which keeps no base rates."""
    scheduler = schedule(attached.trainer, wrap=lambda scheduler, optimizer: AcceleratedScheduler(scheduler,
                                                                                                 optimizer))
    attached.trainer.args = attached.args  # GRPOConfig: learning_rate=1e-5
    send_command(attached.db, attached.callback.run_id, "set_settings", {"changes": {"lr": 3e-5}})
    train_step(attached)
    with StoreReader(attached.db) as reader:
        [command] = reader.commands(attached.callback.run_id)
        [row] = reader.step_metrics(attached.callback.run_id)
    assert command["status"] == "rejected" and command["message"].startswith(
        "lr: the trainer's scheduler is AcceleratedScheduler, not a LambdaLR")
    assert row["settings/lr"] == 1e-5 and scheduler.base_lrs == [1e-5]
    assert scheduler.optimizer.param_groups[0]["lr"] == 1e-5 * (9 / 10)


def test_stop_ends_training_and_the_run_reads_stopped(attached):
    train_step(attached)
    send_command(attached.db, attached.callback.run_id, "stop")
    assert train_step(attached).should_training_stop
    attached.callback.on_train_end(attached.args, attached.state, None)
    with StoreReader(attached.db) as reader:
        assert reader.runs()[0]["status"] == "stopped"


def test_an_alert_in_pause_on_pauses_the_run_until_resumed(tmp_path):
    trainer = fake_trainer([correct, brief])
    callback = RlabCallback(tmp_path / "runs.db", trainer=trainer, success="correct",
                            alerts={"pause_on": "perfect_share"}, poll_interval_s=0.02, beat_s=0.1)
    a = SimpleNamespace(trainer=trainer, callback=callback, args=Args(output_dir=str(tmp_path / "o")),
                        state=SimpleNamespace(global_step=0), db=tmp_path / "runs.db")
    callback.on_train_begin(a.args, a.state, None)
    try:
        worker = threading.Thread(target=train_step, args=(a,), kwargs={"texts": ("4", "4", "4", "4")})
        worker.start()
        rid = callback.run_id
        wait_for(lambda: StoreReader(a.db).run(rid)["status"] == "paused")
        assert worker.is_alive()
        send_command(a.db, rid, "resume")
        worker.join(10)
        with StoreReader(a.db) as reader:
            events = [(e["step"], e["kind"], e["payload"]) for e in reader.events(rid)]
        # every reward is perfect: the first step's zero-spread warning comes first
        assert events[0][1] == "warning" and "every advantage is 0" in events[0][2]["warning"]
        events = events[1:]
        assert [(s, k) for s, k, _ in events] == [(1, "alert"), (1, "pause"), (1, "resume")]
        assert events[0][2]["alert"] == "perfect_share" and events[0][2]["action"] == "pause"
        assert events[1][2]["reason"] == "alert: perfect_share"
    finally:
        callback.on_train_end(a.args, a.state, None)


def test_a_reward_file_as_version_one_and_a_judge_as_one_more_reward(tmp_path):
    from judge_server import ChatCompletionsServer, Reply, scores_json

    from rlab.engine.run.config import JudgeSettings

    rewards = tmp_path / "rewards.py"
    rewards.write_text((FIXTURES / "rewards_v2.py").read_text())
    trainer = fake_trainer([correct, brief])
    replies = [Reply(content=scores_json({"1": 1.0, "2": 0.0, "3": 0.5, "4": 0.25})),
               Reply(status=500, error="no such model")]
    with ChatCompletionsServer(replies) as server:
        judge = JudgeSettings(model="judge", base_url=server.base_url, use_cache=False, max_retries=0, weight=0.5)
        callback = RlabCallback(tmp_path / "runs.db", trainer=trainer, rewards=rewards, judge=judge)
        assert trainer.reward_func_names == ["correct", "brief", "digits_only", "ruler"]
        assert trainer.reward_weights.tolist() == [1.0, 0.25, 0.5, 0.5]
        a = SimpleNamespace(trainer=trainer, callback=callback, args=Args(output_dir=str(tmp_path / "o")),
                            state=SimpleNamespace(global_step=0), db=tmp_path / "runs.db")
        callback.on_train_begin(a.args, a.state, None)
        try:
            train_step(a, texts=("4", "5", "4 apples", "x"))
            train_step(a)  # the judge server now answers 500: the group is failed, not dropped
        finally:
            callback.on_train_end(a.args, a.state, None)
    with StoreReader(a.db) as reader:
        rid = reader.runs()[0]["id"]
        run = reader.run(rid)
        [version] = reader.reward_versions(rid)
        first = reader.group(reader.groups_of_step(rid, 1)[0]["id"])
        second = reader.group(reader.groups_of_step(rid, 2)[0]["id"])
        calls = reader.judge_calls(rid)
        events = [e["kind"] for e in reader.events(rid)]
    assert run["config"]["reward_file"] == str(rewards) and version["source"] == rewards.read_text()
    assert [t["judge_score"] for t in first["trajectories"]] == [1.0, 0.0, 0.5, 0.25]
    assert [t["judge_rank"] for t in first["trajectories"]] == [1, 4, 2, 3]
    assert first["trajectories"][0]["components"] == {"correct": 1.0, "brief": 1.0, "digits_only": 1.0,
                                                      "ruler": 1.0}
    assert first["trajectories"][0]["reward"] == 1.0 + 0.25 + 0.5 + 0.5
    assert (second["judge_status"], "no such model" in second["judge_error"]) == ("failed", True)
    assert "ruler" not in second["trajectories"][0]["components"]  # None: left out of the sum, as TRL does
    assert [c["group_id"] for c in calls] == [second["id"], first["id"]] and events == ["judge_failed"]


def test_two_groups_in_a_row_with_one_prompt_are_stored_apart(attached):
    attached.trainer.num_generations = 4  # two dataset rows with one text, sampled one after the other
    train_step(attached, texts=("4", "5", "4", "x", "4", "4", "4", "1"))
    with StoreReader(attached.db) as reader:
        rid = reader.runs()[0]["id"]
        groups = [reader.group(g["id"]) for g in reader.groups_of_step(rid, 1)]
    assert [[t["idx"] for t in g["trajectories"]] for g in groups] == [[0, 1, 2, 3], [0, 1, 2, 3]]
    assert [g["idx"] for g in groups] == [0, 1]
    assert [t["completion"] for t in groups[1]["trajectories"]] == ["4", "4", "4", "1"]


def test_with_no_success_function_a_trl_run_judges_success_as_our_engine_does(tmp_path):
    """Total reward >= 1 over the reward functions (engine.rewards.success), not "no verdict"."""
    from rlab.engine.rewards.success import SuccessRule

    trainer = fake_trainer([correct, brief], weights=[1.0, 0.5])
    callback = RlabCallback(tmp_path / "runs.db", trainer=trainer, poll_interval_s=0.02, beat_s=0.1)
    a = SimpleNamespace(trainer=trainer, callback=callback, args=Args(output_dir=str(tmp_path / "o")),
                        state=SimpleNamespace(global_step=0), db=tmp_path / "runs.db")
    callback.on_train_begin(a.args, a.state, None)
    texts = ["4", "5", "4", "12345"]
    try:
        train_step(a, texts=tuple(texts))
    finally:
        callback.on_train_end(a.args, a.state, None)
    with StoreReader(a.db) as reader:
        rid = reader.runs()[0]["id"]
        stored = [t["success"] for t in reader.group(reader.groups_of_step(rid, 1)[0]["id"])["trajectories"]]
        rate = reader.step_metrics(rid)[0]["success_rate"]
    # our engine's path on the same functions: the rubric scores, SuccessRule() judges
    rubric = load_rubric(tmp_path / "o" / VERSION_ONE_FILE)
    scores = rubric.score_group([{"prompt": prompt("2+2="), "answer": "4"}] * 4, [completion(t) for t in texts])
    assert stored == [int(SuccessRule().passed(s)) for s in scores] == [1, 0, 1, 0]
    assert rate == 0.5


def test_a_success_function_the_run_lacks_is_refused_with_advice_for_the_callback(tmp_path):
    from rlab.engine.rewards.success import SuccessError

    with pytest.raises(SuccessError, match=r"RlabCallback\(success='exact'\) names no reward function .* correct, "
                                           r"brief\); pass success= one of them"):
        RlabCallback(tmp_path / "runs.db", trainer=fake_trainer([correct, brief]), success="exact")
