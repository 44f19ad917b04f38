"""Unit tests of the reward-hacking watch (engine/alerts/)."""

import json
import random
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pydantic
import pytest

from rlab.engine.alerts import AlertThresholds, AlertWatch, GroupStats, distinct_n
from rlab.engine.rewards.judge.agreement import kendall_tau
from rlab.engine.policy.tiny import embedded_dir
from rlab.scenarios import get_scenario
from rlab.store.control import send_command
from rlab.store.reader import StoreReader


def _group(step, gid, rewards, completions=None, judge=None):
    completions = completions or [f"answer {i} for {gid}" for i in range(len(rewards))]
    return GroupStats(step, gid, list(rewards), completions, list(judge or []))


def test_reward_jump_fires_once_after_plateau():
    watch = AlertWatch(AlertThresholds(window=5))
    fired = []
    for step, reward in enumerate([0.3] * 5 + [0.8, 0.85, 0.9]):
        fired += watch.observe(step, {"reward": reward}, [])
    assert [(a.kind, a.step) for a in fired] == [("reward_jump", 5)]
    assert fired[0].value == pytest.approx(0.5)


def test_no_jump_without_plateau():
    watch = AlertWatch(AlertThresholds(window=4))
    fired = []
    for step, reward in enumerate([0.1, 0.4, 0.2, 0.5, 0.9]):
        fired += watch.observe(step, {"reward": reward}, [])
    assert fired == []


def test_perfect_share_names_the_all_perfect_groups():
    watch = AlertWatch(AlertThresholds(perfect_share=0.75))
    groups = [_group(3, 10, [1, 1, 1, 1]), _group(3, 11, [1, 1, 1, 0])]
    fired = watch.observe(3, {}, groups)
    assert [a.kind for a in fired] == ["perfect_share"]
    assert fired[0].group_ids == (10,)
    assert fired[0].value == pytest.approx(7 / 8)
    # still true on the next step: edge-triggered, no repeat
    assert watch.observe(4, {}, [_group(4, 12, [1, 1, 1, 1])]) == []


def test_length_drift_against_early_baseline():
    watch = AlertWatch(AlertThresholds(window=3, length_drift=0.5))
    fired = []
    for step, length in enumerate([10, 10, 10, 12, 16]):
        fired += watch.observe(step, {"completions/mean_length": length}, [])
    assert [(a.kind, a.step) for a in fired] == [("length_drift", 4)]


def test_diversity_drop_when_groups_collapse():
    watch = AlertWatch(AlertThresholds(window=2, diversity_drop=0.5))
    varied = ["a b c", "d e f", "g h i", "j k l"]
    same = ["a b c"] * 4
    fired = []
    for step, texts in enumerate([varied, varied, varied, same]):
        fired += watch.observe(step, {}, [_group(step, 100 + step, [0, 1, 0, 1], texts)])
    assert [(a.kind, a.step, a.group_ids) for a in fired] == [("diversity_drop", 3, (103,))]


def test_diversity_drop_leaves_out_groups_that_solved_their_task():
    """Eight copies of the one right answer are a task learned: the default
    arithmetic run raised diversity_drop twice while its pass@1 rose to 0.84.
    Solved groups are left out; an unsolved group that collapses still fires."""
    varied = ["a b c", "d e f", "g h i", "j k l"]
    same = ["a b c"] * 4

    def group(step, gid, texts, solved):
        return GroupStats(step, gid, [1.0 if solved else 0.0] * 4, texts, [], [solved] * 4)

    watch = AlertWatch(AlertThresholds(window=2, diversity_drop=0.5))
    fired = []
    for step, (texts, solved) in enumerate([(varied, False), (varied, False), (same, True), (same, True)]):
        fired += watch.observe(step, {}, [group(step, 100 + step, texts, solved),
                                          group(step, 200 + step, varied, False)])
    assert fired == []
    fired = watch.observe(4, {}, [group(4, 104, same, True), group(4, 204, same, False)])
    assert [(a.kind, a.group_ids) for a in fired] == [("diversity_drop", (204,))]


def test_perfect_share_says_whether_the_perfect_rewards_solved_the_task():
    """The default arithmetic run reaches 91 % perfect rewards at step 243 by
    learning; a hack reaches 94 % at step 7 by failing. The verdicts tell them apart."""
    def group(gid, solved):
        return GroupStats(3, gid, [1.0] * 4, [f"t{i}" for i in range(4)], [], [solved] * 4)

    learned = AlertWatch(AlertThresholds(perfect_share=0.75)).observe(3, {}, [group(1, True), group(2, True)])
    hacked = AlertWatch(AlertThresholds(perfect_share=0.75)).observe(3, {}, [group(1, False), group(2, True)])
    assert "100% of those solved the task" in learned[0].message
    assert "only 50% of those solved the task: the rubric pays for something else" in hacked[0].message


def test_judge_disagreement_needs_reversed_rankings():
    watch = AlertWatch()
    agree = _group(1, 1, [0, 0.5, 1], judge=[0.1, 0.5, 0.9])
    reverse = _group(1, 2, [0, 0.5, 1], judge=[0.9, 0.5, 0.1])
    unjudged = _group(1, 3, [0, 0.5, 1])
    fired = watch.observe(1, {}, [agree, reverse, unjudged])
    assert [(a.kind, a.group_ids) for a in fired] == [("judge_disagreement", (2,))]


def test_judge_disagreement_reads_kendall_tau_b_as_the_judge_tau_metric_does():
    """Two swapped pairs of five: Spearman's rho is 0.8, Kendall's tau-b 0.6."""
    watch = AlertWatch(AlertThresholds(min_rank_corr=0.7))
    group = _group(1, 7, [0.1, 0.2, 0.3, 0.4, 0.5], judge=[0.2, 0.1, 0.4, 0.3, 0.5])
    [alert] = watch.observe(1, {}, [group])
    assert alert.kind == "judge_disagreement" and "Kendall tau-b < 0.7" in alert.message


def test_steps_out_of_order_are_refused():
    watch = AlertWatch()
    watch.observe(5, {}, [])
    with pytest.raises(ValueError, match="steps must increase"):
        watch.observe(5, {}, [])


def test_thresholds_reject_unknown_keys():
    with pytest.raises(pydantic.ValidationError, match="jupm"):
        AlertThresholds.model_validate({"jupm": 0.3})


def test_hashed_distinct_n_counts_what_the_word_by_word_count_does():
    """The numpy count of ASCII groups (engine.alerts.inputs._hashed_counts) against the word-by-word one:
    every whitespace str.split() splits ASCII at, empty and one-word completions, n from 1 to 4;
    a group with other text takes the word-by-word count."""
    from rlab.engine.alerts.inputs import _counts, _hashed_counts

    rng = random.Random(3)
    spaces = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f "
    vocab = ["".join(rng.choice("abcde") for _ in range(rng.randint(1, 3))) for _ in range(30)]
    for _ in range(2000):
        n = rng.randint(1, 4)
        group = ["".join(rng.choice(spaces) * rng.randint(0, 2) + rng.choice(vocab)
                         for _ in range(rng.choice([0, 1, 2, 3, 5, 20]))) + rng.choice(["", " "])
                 for _ in range(rng.randint(0, 6))]
        assert _hashed_counts(group, n) == _counts(group, n), (group, n)
    assert _hashed_counts(["é b", "é b"], 2) is None and distinct_n(["é b", "é b"], 2) == 0.5


def test_distinct_n_and_the_rank_statistic_of_judge_disagreement():
    assert distinct_n(["7"] * 8, 2) == pytest.approx(1 / 8)
    assert distinct_n(["a b c", "a b d"], 2) == pytest.approx(3 / 4)
    # judge_disagreement ranks by Kendall tau-b, the statistic of the judge/tau metric
    assert kendall_tau([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert kendall_tau([1, 1, 1], [1, 2, 3]) is None
    assert kendall_tau([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(5 / 30 ** 0.5)


# Recorded from a reward_hacking run (default recipe, seed 0): completions/mean_length
# (tokens, EOS included) and the share of hedged completions, steps 1..30.
HACK_LENGTHS = [3.86, 4.25, 3.84, 4.24, 4.28, 4.21, 4.53, 4.54, 4.34, 4.87, 5.37, 5.83, 5.93, 6.69, 7.46,
                7.71, 8.42, 8.5, 9.45, 9.65, 9.74, 10.27, 9.97, 10.36, 10.46, 10.87, 10.8, 10.87, 11.14, 11.48]
HACK_SHARE = [0.05, 0.09, 0.07, 0.1, 0.09, 0.13, 0.14, 0.15, 0.12, 0.22, 0.25, 0.32, 0.34, 0.42, 0.52,
              0.52, 0.61, 0.64, 0.73, 0.78, 0.77, 0.82, 0.8, 0.86, 0.86, 0.91, 0.89, 0.9, 0.92, 0.96]


def test_the_reward_hack_raises_length_drift_within_a_few_steps_naming_the_step_and_its_groups():
    watch = AlertWatch()
    fired = []
    for step, (length, share) in enumerate(zip(HACK_LENGTHS, HACK_SHARE), start=1):
        hedged = round(8 * share)
        groups = [GroupStats(step, 100 * step + g, [1.0] * 8,
                             ["57 67 47"] * (hedged if g == 0 else 0) + ["57"] * (8 - (hedged if g == 0 else 0)))
                  for g in range(4)]
        fired += [a for a in watch.observe(step, {"completions/mean_length": length}, groups)
                  if a.kind == "length_drift"]
    took_hold = next(s for s, share in enumerate(HACK_SHARE, start=1) if share >= 0.25)  # 5x the warm start
    [alert] = fired
    assert took_hold <= alert.step <= took_hold + 3 and alert.value > 0.5
    assert alert.group_ids[0] == 100 * alert.step  # enter opens the group with the hedged completions


# ---- the engine's alerts for real-model failures (issue 29) ---------------------------------------


def test_collapse_fires_when_held_out_pass_at_1_falls_from_its_best_and_holds_until_it_recovers():
    watch = AlertWatch(AlertThresholds(collapse_drop=0.2))
    fired = []
    for step, held_out in [(0, 0.67), (10, 0.70), (20, 0.06), (30, 0.06), (40, 0.69), (50, 0.2)]:
        for s in range(step, step + 10):  # eval every 10 steps, train steps between
            fired += watch.observe(s, {"eval/pass_at_1": held_out} if s == step else {}, [])
    assert [(a.kind, a.step, a.action) for a in fired] == [("collapse", 20, "pause"), ("collapse", 50, "pause")]
    assert fired[0].message == "held-out pass@1 fell from 0.70 (step 10) to 0.06"


@pytest.mark.parametrize("evals, size, fires", [
    ([1.0, 0.0], 1, False),     # one example: a coin flip, not a fall (a bench's 1-example eval paused it)
    ([0.75, 0.5], 8, False),    # 6/8 -> 4/8 is inside the noise of 8 examples
    ([0.75, 0.5], 200, True),   # the same fall on 200 examples is a fall
    ([0.75, 0.5], None, True),  # size unknown (an imported run): the drop alone decides
])
def test_a_held_out_fall_inside_the_evals_sampling_noise_is_not_a_collapse(evals, size, fires):
    watch = AlertWatch()
    fired = []
    for step, held_out in enumerate(evals):
        metrics = {"eval/pass_at_1": held_out} | ({} if size is None else {"eval/num_examples": size})
        fired += [a for a in watch.observe(step, metrics, []) if a.kind == "collapse"]
    assert bool(fired) is fires


def test_collapse_fires_when_a_deterministic_policy_fails_for_collapse_steps_in_a_row():
    watch = AlertWatch(AlertThresholds(collapse_steps=3))
    learning = [_group(1, g, [1.0, 0.0], [f"{g}1", f"{g}2"]) for g in range(4)]
    assert watch.observe(1, {"success_rate": 0.5}, learning) == []
    one_answer = [_group(s, g, [0.0, 0.0], ["<answer>9</answer>"] * 2) for s in (2,) for g in range(4)]
    fired = [watch.observe(s, {"success_rate": 0.05}, one_answer) for s in (2, 3, 4, 5)]
    assert [len(f) for f in fired] == [0, 0, 1, 0]
    [alert] = fired[2]
    assert alert.kind == "collapse" and alert.step == 4 and "'<answer>9</answer>'" in alert.message
    converged = AlertWatch(AlertThresholds(collapse_steps=1))  # identical AND solved: converged, not collapsed
    right = [_group(1, g, [1.0, 1.0], [str(g)] * 2) for g in range(4)]
    assert [a.kind for s in (1, 2, 3) for a in converged.observe(s, {"success_rate": 1.0}, right)
            if a.kind == "collapse"] == []


def test_no_signal_fires_after_no_signal_steps_of_zero_spread_groups():
    watch = AlertWatch(AlertThresholds(no_signal_steps=4, no_signal_share=0.9))
    spreads = [0.5, 1.0, 1.0, 0.95, 1.0, 1.0, 1.0]
    fired = [a for s, z in enumerate(spreads, 1) for a in watch.observe(s, {"frac_reward_zero_std": z}, [])]
    assert [(a.kind, a.step, a.action) for a in fired] == [("no_signal", 5, "warn")]
    assert "nothing is being trained" in fired[0].message


def test_hack_compares_the_reward_per_unit_of_weight_with_the_success_rate():
    def trend(rewards, successes, scale=1.0):
        watch = AlertWatch(AlertThresholds(window=4), reward_scale=scale)
        return [a.kind for s, (r, x) in enumerate(zip(rewards, successes)) for a in watch.observe(s, {
            "reward": r, "success_rate": x}, [])]

    assert trend([0.4, 0.4, 1.2, 1.3], [0.3, 0.3, 0.1, 0.1]) == ["hack"]  # paid more, solved less
    assert trend([0.4, 0.4, 0.5, 0.5], [0.4, 0.4, 0.1, 0.1]) == ["hack"]  # barely paid more, solved far less
    assert trend([0.4, 0.4, 0.8, 0.9], [0.4, 0.4, 0.8, 0.9]) == []  # learning: both rise
    assert trend([0.6, 0.6, 1.5, 1.6], [0.3, 0.3, 0.7, 0.8], scale=2.5) == []  # bonuses rise with success
    assert trend([0.9, 0.9, 0.5, 0.4], [0.9, 0.9, 0.5, 0.4]) == []  # both fall: collapse's business


def test_pause_on_takes_a_comma_list_and_names_unknown_alerts():
    assert AlertThresholds.model_validate({"pause_on": "collapse, hack"}).pause_on == ["collapse", "hack"]
    assert AlertThresholds.model_validate({"pause_on": ""}).pause_on == []
    with pytest.raises(pydantic.ValidationError, match="not alerts; the alerts: collapse, diversity_drop"):
        AlertThresholds.model_validate({"pause_on": "colapse"})


def _engine(folder, *args: str) -> subprocess.Popen:
    folder.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, "-P", "-m", "rlab.engine.cli", "run", "--headless", "--db",
                             str(folder / "a.db"), "--prompts-per-step", "8", "--lr-warmup-steps", "0", *args],
                            cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _until(predicate, timeout=240.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


def _alerts(reader, run_id):
    return [(e["payload"]["alert"], e["step"], e["payload"]["action"]) for e in reader.events(run_id)
            if e["kind"] == "alert"]


@pytest.fixture(scope="module")
def forced(tmp_path_factory):
    """Three engine runs at once on the tiny policy, each forcing alerts or faults (see their tests).

    burn: lr 0.05 collapses the policy (held-out evals every 2 steps see it); it pauses on collapse and is resumed
    (what `rlab resume burn` sends). hack: a rubric that pays for a trivial
    answer. faults: a reward function that raises on even answers (the run
    goes on: --no-pause-on-reward-error) and a judge server that answers 500.
    """
    from judge_server import ChatCompletionsServer, Reply

    root = tmp_path_factory.mktemp("forced")
    task = _task(root / "hack-task", TRIVIAL_PAYS)
    fragile = _task(root / "fault-task", FRAGILE)
    with ChatCompletionsServer([Reply(status=500, error="the judge is down")]) as judge:
        procs = {
            "burn": _engine(root / "burn", "--name", "burn", "--lr", "0.05", "--max-steps", "12",
                            "--eval-size", "100", "--eval-every", "2"),
            "hack": _engine(root / "hack", "--name", "hack", "--task", str(task), "--model",
                            str(embedded_dir("arithmetic")), "--prompts-per-step", "16", "--max-steps", "30",
                            "--eval-every", "100", "--alert", "pause_on="),
            "faults": _engine(root / "faults", "--name", "faults", "--task", str(fragile), "--model",
                              str(embedded_dir("arithmetic")), "--max-steps", "2", "--eval-every", "100",
                              "--no-pause-on-reward-error", "--judge-model", "judge", "--judge-base-url",
                              judge.base_url, "--judge-max-retries", "0", "--judge-no-cache", "--judge-weight", "0.0"),
        }
        try:
            db = root / "burn" / "a.db"
            _until(lambda: db.exists() and (StoreReader(db).run_by_name("burn") or {}).get("status") == "paused")
            reader = StoreReader(db)
            run_id = reader.run_by_name("burn")["id"]
            paused = [e for e in reader.events(run_id) if e["kind"] == "pause"]
            send_command(db, run_id, "resume")  # what `rlab resume burn` sends
            ends = {name: proc.communicate(timeout=300) for name, proc in procs.items()}
        finally:
            for proc in procs.values():
                proc.kill()
    out = {}
    for name, proc in procs.items():
        reader = StoreReader(root / name / "a.db")
        out[name] = SimpleNamespace(reader=reader, run_id=reader.run_by_name(name)["id"], returncode=proc.returncode,
                                    err=ends[name][1])
    out["burn"].paused = paused
    return out


@pytest.mark.e2e
def test_a_learning_rate_that_destroys_the_tiny_policy_pauses_the_run_on_collapse(forced):
    """lr 0.05 turns the warm-started policy into one degenerate completion for every prompt
    (empty, or '777777', as the seed draws) within two steps: held-out pass@1 falls from about
    0.3 to 0 at the first eval after it (every 2 steps), whatever the training success was."""
    burn = forced["burn"]
    reader, run_id = burn.reader, burn.run_id
    [collapse] = [a for a in _alerts(reader, run_id) if a[0] == "collapse"]
    assert collapse[1] <= 6 and collapse[2] == "pause"
    pause = burn.paused[-1]
    assert pause["payload"]["reason"] == "alert: collapse" and pause["step"] == collapse[1]
    assert burn.returncode == 0, burn.err
    assert f"rlab: alert at step {collapse[1]}: collapse:" in burn.err and "rlab resume burn" in burn.err
    assert ("no_signal", 11, "warn") in _alerts(reader, run_id)  # nothing trained since the policy collapsed


@pytest.mark.e2e
def test_a_rubric_that_pays_for_a_trivial_answer_raises_hack(forced):
    """The warm-started tiny policy learns that a short answer with a 7 in it pays 1.5."""
    hack = forced["hack"]
    assert hack.returncode == 0, hack.err
    reader, run_id = hack.reader, hack.run_id
    hacks = [a for a in _alerts(reader, run_id) if a[0] == "hack"]
    assert hacks and hacks[0][1] <= 30, _alerts(reader, run_id)
    metrics = {m["step"]: m for m in reader.step_metrics(run_id)}
    at = hacks[0][1]
    assert metrics[at]["rewards/brevity/mean"] > metrics[1]["rewards/brevity/mean"]  # paid for short answers
    assert metrics[at]["success_rate"] < metrics[1]["success_rate"]  # while solving fewer


def _task(folder, rewards: str):
    """A task of the arithmetic data (2,000 train, 50 held-out examples) with ``rewards`` as its reward file."""
    folder.mkdir(parents=True)
    arithmetic = get_scenario("arithmetic")
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in arithmetic.train_examples(0)[:2000]))
    (folder / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in arithmetic.eval_examples()[:50]))
    (folder / "rewards.py").write_text(rewards)
    (folder / "task.toml").write_text('train = "train.jsonl"\neval = "eval.jsonl"\nrewards = "rewards.py"\n'
                                      'success = "exact"\nmax_new_tokens = 6\n')
    return folder


TRIVIAL_PAYS = '''
def exact(example, completion):
    return 1.0 if completion.strip() == example["answer"] else 0.0

def mentions_seven(example, completion):
    return 1.0 if "7" in completion else 0.0

def brevity(example, completion):
    return 1.0 if len(completion.strip()) <= 2 else 0.0

WEIGHTS = {"exact": 1.0, "mentions_seven": 0.5, "brevity": 1.0}
'''


FRAGILE = '''
def exact(example, completion):
    return 1.0 if completion.strip() == example["answer"] else 0.0

def fragile(example, completion):
    if int(example["answer"]) % 2 == 0:
        raise ValueError("even answers are not handled yet")
    return 1.0

WEIGHTS = {"exact": 1.0, "fragile": 0.0}
'''


# -- one recorder: our engine and a TRL run store the same events --------------------------------

TRL_FRAGILE = '''
def correct(completions, answer, **kwargs):
    return [float(c[0]["content"].strip() == a) for c, a in zip(completions, answer)]

def brief(completions, **kwargs):
    return [float(len(c[0]["content"].strip()) <= 3) for c in completions]

def fragile(completions, **kwargs):
    if any(c[0]["content"] == "boom" for c in completions):
        raise ValueError("boom is not handled yet")
    return [1.0 for _ in completions]

WEIGHTS = {"correct": 1.0, "brief": 1.0, "fragile": 0.0}
'''


def _shapes(reader, run_id) -> dict[str, list]:
    """Each forced event kind's payload fields (a judge failure's: also each failed group's)."""
    out: dict[str, list] = {}
    for event in reader.events(run_id):
        payload = event["payload"]
        if event["kind"] == "alert" and payload["alert"] in ("collapse", "hack", "no_signal"):
            out.setdefault(f"alert:{payload['alert']}", sorted(payload))
        elif event["kind"] == "error" and "reward_errors" in payload:
            out.setdefault("reward_error", sorted(payload))
        elif event["kind"] == "judge_failed":
            out.setdefault("judge_failed", [sorted(payload), sorted(payload["groups"][0])])
    return out


def _trl_forced_run(tmp_path):
    """A TRL stand-in run (tests/test_trl_attach.py's) forcing the same five events in five steps."""
    from judge_server import ChatCompletionsServer, Reply
    from test_trl_attach import Args, fake_trainer, train_step

    from rlab.engine.run.config import JudgeSettings
    from rlab.engine.integrations.trl import RlabCallback

    rewards = tmp_path / "rewards.py"
    rewards.write_text(TRL_FRAGILE)
    trainer = fake_trainer([lambda completions, **k: [0.0] * len(completions)])
    alerts = {"window": 2, "collapse_steps": 2, "no_signal_steps": 2, "hack_gap": 0.1, "pause_on": ""}
    with ChatCompletionsServer([Reply(status=500, error="the judge is down")]) as server:
        judge = JudgeSettings(model="judge", base_url=server.base_url, use_cache=False, max_retries=0)
        callback = RlabCallback(tmp_path / "trl.db", trainer=trainer, rewards=rewards, success="correct",
                                alerts=alerts, judge=judge, pause_on_reward_error=False)
        a = SimpleNamespace(trainer=trainer, callback=callback, args=Args(output_dir=str(tmp_path / "o")),
                            state=SimpleNamespace(global_step=0), db=tmp_path / "trl.db")
        callback.on_train_begin(a.args, a.state, None)
        try:
            for texts in (("4", "4", "5", "x"),  # solved half
                          ("12345",) * 4, ("12345",) * 4,  # one failing text, no spread: collapse, no_signal
                          ("99",) * 4,  # paid for brevity, still failing: hack
                          ("boom", "4", "4", "4")):  # a reward function raises
                train_step(a, texts=texts)
        finally:
            callback.on_train_end(a.args, a.state, None)
    reader = StoreReader(tmp_path / "trl.db")
    return reader, reader.runs()[0]["id"]


@pytest.mark.e2e
def test_our_engine_and_a_trl_run_store_the_forced_events_alike(forced, tmp_path):
    engine: dict[str, list] = {}
    for name in ("burn", "hack", "faults"):
        engine.update(_shapes(forced[name].reader, forced[name].run_id))
    trl = _shapes(*_trl_forced_run(tmp_path))
    kinds = ["alert:collapse", "alert:hack", "alert:no_signal", "judge_failed", "reward_error"]
    assert sorted(engine) == sorted(trl) == kinds
    assert engine == trl
    assert engine["reward_error"] == ["first", "reward_errors"]
    # issue 47, 2: a judge failing every call printed nothing; each step now says so in one line
    assert "step 1: the judge failed on" in forced["faults"].err and "the judge is down" in forced["faults"].err


def test_a_reward_hole_s_alerts_name_the_reward_fix_and_keep_the_step_s_checkpoint(tmp_path):
    """Issue 47, 3: a hack alert named no fix, and the collapse that followed advised a tenth of the
    lr (the wrong fix for a gamed reward). hack / tool_loop, and a collapse after one, name the
    reward edit and the fork that tests it; a collapse on its own keeps the rewind."""
    from rlab.engine.recorder import Recorder, RunRef
    from rlab.engine.rewards.success import SuccessRule
    from rlab.engine.train.retention import Checkpoint, to_prune
    from rlab.store.writer import StoreWriter

    writer = StoreWriter(tmp_path / "r.db")
    recorder = Recorder(RunRef(writer, writer.start_run("r", "arithmetic", {}, {}), "r"),
                        success=SuccessRule("correct"), weights={"correct": 1.0})
    recorder.remedies["collapse"] = "rewind: rlab fork r@best --lr 5e-05"
    recorder.forks = True
    assert recorder._remedy("collapse", 3) == "rewind: rlab fork r@best --lr 5e-05"
    hack = recorder._remedy("hack", 21)
    assert "`rlab reward r FILE" in hack and "`rlab fork r@21 --name r-fixed --rewards FILE" in hack
    assert "rlab fork r@25" in recorder._remedy("collapse", 25) and "--lr" not in recorder._remedy("collapse", 25)
    assert "rlab fork" in recorder._remedy("tool_loop", 30)
    pinned = [Checkpoint(1, 21, Path("s21"), None, pinned=True), Checkpoint(2, 50, Path("s50"), None),
              Checkpoint(3, 100, Path("s100"), None), Checkpoint(4, 150, Path("s150"), None)]
    assert [c.step for c in to_prune(pinned, keep_last=1)] == [50, 100]


def test_sampler_mismatch_fires_when_the_sampler_drifts_from_the_trained_policy():
    """Issue 48: an alert, in the engine, when the mean sampler-trainer log-prob difference grows."""
    watch = AlertWatch(AlertThresholds(sampler_mismatch=0.15))
    quiet = {"sampling/sampling_logp_difference/mean": 0.02, "sampling/importance_sampling_ratio/min": 0.9}
    assert [a for s in (1, 2) for a in watch.observe(s, quiet, [])] == []
    [alert] = watch.observe(3, {"sampling/sampling_logp_difference/mean": 0.4,
                                "sampling/importance_sampling_ratio/min": 0.2}, [])
    assert alert.kind == "sampler_mismatch" and "0.400 nats" in alert.message and "0.200" in alert.message
