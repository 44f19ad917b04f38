"""Multi-step runs train on the rubric (issue 16): one scoring path, edits that bite,
the judge on whole episodes, the system prompt in every episode, and an episode
trained as one sequence with the same per-token loss as one sample per turn."""

import copy
import random

import numpy as np
import pytest
import torch
from judge_server import ChatCompletionsServer, Reply, scores_json
from test_multiturn import ScriptedPolicy, bisect, last_interval

from rlab.engine.run.config import RunConfig
from rlab.engine.policy.model import Policy
from rlab.engine.rewards.edit.gate import accept_edit, check_samples
from rlab.engine.rewards.judge.ruler import RulerJudge
from rlab.engine.rewards.rubric import load_rubric
from rlab.engine.rewards.scoring import score
from rlab.engine.rewards.scoring_process import ProcessRubric, ScoringProcess
from rlab.engine.rollout.episodes import run_group
from rlab.engine.rollout.play import Rollout
from rlab.engine.train.advantages import grpo, rollout_advantages
from rlab.engine.train.batch import episode_samples, to_batch, train_samples
from rlab.engine.train.microbatch import collate
from rlab.engine.train.trainer import TrainConfig, Trainer
from rlab.engine.types import Rollouts
from rlab.scenarios.number_guess import SCENARIO as GUESS


def mixed_policy(seed=0):
    """Binary search half the time, a random legal guess otherwise: groups with spread."""
    rng = random.Random(seed)

    def act(conversation):
        lo, hi = last_interval(conversation)
        return bisect(conversation) if rng.random() < 0.5 else str(rng.randint(lo, hi))

    return ScriptedPolicy(act)


def guess_rollouts(policy, secrets=(23, 5, 50), n=6):
    examples = [{"id": f"s{s}", "prompt": "1..63?", "answer": str(s), "secret": s} for s in secrets]
    groups = [run_group(policy, GUESS.make_env, ex, n, max_turns=GUESS.max_turns, max_new_tokens=4,
                        temperature=1.0, system_prompt=GUESS.system_prompt) for ex in examples]
    return Rollouts(examples, groups, multi_step=True)


def advantages_of(rollouts, scorer, method="gigpo"):
    scored = score(rollouts, scorer)
    skip = scored.judge_failed | scored.errored_groups
    return scored, rollout_advantages(rollouts, scored.rewards, skip, method=method,
                                      turn_rewards=scored.turn_rewards)


def test_env_reward_is_one_weighted_component_and_turn_rewards_sum_to_the_reward():
    rollouts = guess_rollouts(mixed_policy())
    rubric = load_rubric(GUESS.reward_file)
    scored, _ = advantages_of(rollouts, rubric.with_weights({"solved": 0.0, "env_reward": 2.0}))
    for s, r, t in zip(scored.scores, scored.turn_rewards, rollouts.trajectories()):
        assert s.error is None
        assert s.components["env_reward"] == t.total_reward  # the environment's own reward, unweighted
        assert s.reward == pytest.approx(2.0 * t.total_reward)
        assert r.sum() == pytest.approx(s.reward) and r.tolist() == pytest.approx([2.0 * x for x in t.step_rewards])
    # solved scores the episode as a whole: its reward is paid on the last turn
    scored, _ = advantages_of(rollouts, rubric)
    for s, r in zip(scored.scores, scored.turn_rewards):
        assert r[:-1].tolist() == [0.0] * (len(r) - 1) and r[-1] == s.reward


def test_step_rewards_keyed_by_turn_index_and_misfits_are_errors(tmp_path):
    rollouts = guess_rollouts(ScriptedPolicy(bisect), secrets=(23,), n=2)  # 23: 6 guesses
    path = tmp_path / "rewards.py"
    path.write_text("def first(example, completion):\n"
                    "    return {'reward': 0.5, 'step_rewards': {0: 0.25}}\n\n"
                    "WEIGHTS = {'first': 2.0}\n")
    scored = score(rollouts, load_rubric(path))
    assert scored.turn_rewards[0].tolist() == [0.5, 0.0, 0.0, 0.0, 0.0, 0.5]  # 2 * 0.25 on turn 0, the rest last
    path.write_text("def late(example, completion):\n"
                    "    return {'reward': 1.0, 'step_rewards': {9: 1.0}}\n\n"
                    "WEIGHTS = {'late': 1.0}\n")
    scored = score(rollouts, load_rubric(path))
    assert scored.scores[0].reward == 0.0 and "turn index 9" in scored.scores[0].error
    assert scored.errored_groups.tolist() == [True]


def test_a_reward_edit_changes_the_next_steps_multi_step_advantages():
    """The edit path of a run (check, then the scoring process): weights x2 -> advantages x2."""
    rollouts = guess_rollouts(mixed_policy(1))
    rubric = load_rubric(GUESS.reward_file)
    process = ScoringProcess()
    try:
        _, before = advantages_of(rollouts, ProcessRubric(rubric, process))
        scored = score(rollouts, rubric)
        groups = to_batch(rollouts, scored, before, 1).groups
        edited = accept_edit({"source": rubric.source, "weights": {"solved": 2.0, "env_reward": 0.0}},
                             check_samples(groups, multi_step=True))
        _, after = advantages_of(rollouts, ProcessRubric(edited, process))
    finally:
        process.close()
    assert np.abs(np.concatenate(before.per_turn)).max() > 0  # the test has signal to change
    for b, a in zip(before.per_turn, after.per_turn):
        assert a == pytest.approx(2.0 * b)  # mean_norm GiGPO is linear in the rewards
    assert after.rewards == pytest.approx(2.0 * before.rewards)


def test_the_judge_ranks_whole_episodes_and_its_scores_train():
    rollouts = guess_rollouts(mixed_policy(2), secrets=(40,), n=3)
    rubric = load_rubric(GUESS.reward_file)
    with ChatCompletionsServer([Reply(content=scores_json({"1": 0.0, "2": 0.5, "3": 1.0}))]) as server:
        with RulerJudge("judge-test", base_url=server.base_url, use_cache=False, timeout_s=2.0) as judge:
            scored = score(rollouts, rubric, judge, judge_weight=1.0)
    sent = server.requests[0]["messages"][1]["content"]
    assert GUESS.system_prompt.strip() in sent  # the shared opening, once
    assert sent.count('<trajectory id="') == 3 and sent.count('"role": "assistant"') >= 3  # whole episodes
    assert scored.rewards.tolist() == [[0.0, 0.5, 1.0]]
    advantages = rollout_advantages(rollouts, scored.rewards, scored.judge_failed, method="grpo",
                                    turn_rewards=scored.turn_rewards)
    # GRPO's advantage of the judge's scores (std 0.5) on every turn
    assert [a[0] for a in advantages.per_turn] == pytest.approx([-1.0, 0.0, 1.0], abs=1e-3)


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_multi_step_grpo_is_grpo_of_the_episode_rewards_on_every_turn(mode):
    # GiGPO's normalisation mode is GiGPO's: the GRPO baseline divides by the std
    # (Shao et al. 2024), Dr. GRPO only centres, whatever --gigpo-mode says.
    rollouts = guess_rollouts(mixed_policy(3))
    scored = score(rollouts, load_rubric(GUESS.reward_file))
    assert scored.rewards.std(axis=1).min() > 0  # every group has spread
    for method, expected in (("grpo", grpo(scored.rewards)), ("dr_grpo", grpo(scored.rewards, scale="none"))):
        advantages = rollout_advantages(rollouts, scored.rewards, np.zeros(3, bool), method=method,
                                        turn_rewards=scored.turn_rewards, mode=mode)
        for a, e, t in zip(advantages.per_turn, expected.reshape(-1), rollouts.trajectories()):
            assert a.tolist() == pytest.approx([e] * len(t.turns))
        assert advantages.per_trajectory == pytest.approx(expected.reshape(-1))
    gigpo_run = rollout_advantages(rollouts, scored.rewards, np.zeros(3, bool), method="gigpo",
                                   turn_rewards=scored.turn_rewards, omega=0.0)
    dr_grpo = grpo(scored.rewards, scale="none").reshape(-1)
    assert [a[0] for a in gigpo_run.per_turn] == pytest.approx(dr_grpo)  # mean_norm GiGPO at omega 0


def test_the_system_prompt_opens_every_episode_the_model_sees():
    seen = []
    policy = ScriptedPolicy(lambda conversation: (seen.append(conversation), bisect(conversation))[1])
    rollout = Rollout(policy, GUESS, RunConfig(scenario="number_guess", group_size=2, max_new_tokens=4))
    rollouts = rollout.play(GUESS.eval_examples()[:2])
    assert all(t.messages[0] == {"role": "system", "content": GUESS.system_prompt} for t in rollouts.trajectories())
    assert seen and all(c.startswith(GUESS.system_prompt) for c in seen)


@pytest.fixture()
def sampled_episodes(raw_tiny_model_dir):
    """Episodes sampled by the (untrained) tiny policy: real token ids and log-probs."""
    policy = Policy.load(raw_tiny_model_dir, "cpu")
    torch.manual_seed(3)
    example = {"id": "x", "prompt": "1..63?", "answer": "9", "secret": 9}
    episodes = run_group(policy, GUESS.make_env, example, 4, max_turns=GUESS.max_turns, max_new_tokens=3,
                         temperature=1.0, system_prompt=GUESS.system_prompt)
    rng = np.random.default_rng(0)
    advantages = [rng.normal(size=len(ep.turns)) for ep in episodes]
    advantages[0][1] = 0.0  # a zero-advantage turn inside an episode is left out, as its own sample would be
    return policy, episodes, advantages


def trained_token_losses(trainer, samples, clip_eps=0.2):
    """Per trained token (in order): the clipped surrogate loss term, from one forward pass."""
    batch = collate(samples, trainer.pad_id, "cpu", drop_zero_advantage=True)
    with torch.no_grad():
        logp, _ = trainer._token_logprobs(trainer.model, batch)
    ratio = torch.exp(logp - (batch.old_logprobs - 0.05))  # a ratio away from 1
    adv = batch.advantages
    loss = -torch.minimum(ratio * adv, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * adv)
    return loss[batch.mask > 0].numpy()


@pytest.mark.parametrize("loss_tokens", ["with_signal", "all"])
def test_one_sequence_per_episode_gives_the_per_turn_loss(sampled_episodes, loss_tokens):
    policy, episodes, advantages = sampled_episodes
    per_turn = train_samples(episodes, advantages)
    sequences = episode_samples(episodes, advantages)
    assert len(sequences) < len(per_turn)  # turns were merged into episodes
    trainer = Trainer(policy.model, policy.pad_id, TrainConfig(num_iterations=1))
    reference = trained_token_losses(trainer, per_turn)
    merged = trained_token_losses(trainer, sequences)
    assert len(merged) == len(reference) > 0
    np.testing.assert_allclose(merged, reference, rtol=1e-4, atol=1e-5)
    # and one update from each path has the same gradient
    models = [copy.deepcopy(policy.model) for _ in range(2)]
    metrics = [Trainer(m, policy.pad_id, TrainConfig(num_iterations=1, lr=1e-3, loss_tokens=loss_tokens)).step(s)
               for m, s in zip(models, (per_turn, sequences))]
    assert metrics[0]["loss"] == pytest.approx(metrics[1]["loss"], rel=1e-4, abs=1e-6)
    assert metrics[0]["grad_norm"] == pytest.approx(metrics[1]["grad_norm"], rel=1e-3)
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-3, atol=1e-7)


def test_a_context_that_does_not_extend_the_last_starts_a_new_sample():
    """The scripted policy renders with separators the sampled text lacks: no merge is possible."""
    episodes = guess_rollouts(ScriptedPolicy(bisect), secrets=(23,), n=2).groups[0]
    advantages = [np.ones(len(ep.turns)) for ep in episodes]
    assert len(episode_samples(episodes, advantages)) == len(train_samples(episodes, advantages))


def test_the_reward_editor_preview_scores_env_reward_as_the_run_did(tmp_path):
    """Stored groups re-scored outside the run (the editor's preview, the group
    view's version compare) get the turns' stored environment rewards: a rubric
    that weighs only env_reward gives each episode what the environment paid."""
    from rlab.engine.rewards.edit.check import dry_run
    from rlab.engine.rewards.edit.stored import recent_groups
    from rlab.store.reader import StoreReader
    from rlab.store.writer import StoreWriter

    rollouts = guess_rollouts(mixed_policy(2))
    rubric = load_rubric(GUESS.reward_file)
    scored, advantages = advantages_of(rollouts, rubric)
    writer = StoreWriter(tmp_path / "runs.db")
    run_id = writer.start_run("guess", "number_guess", {}, {})
    writer.write_groups(run_id, 1, to_batch(rollouts, scored, advantages, 1).groups)
    writer.close()
    groups = recent_groups(StoreReader(tmp_path / "runs.db"), run_id, 3)
    env_only = rubric.source.replace('WEIGHTS = {"solved": 1.0, "env_reward": 0.0}',
                                     'WEIGHTS = {"solved": 0.0, "env_reward": 1.0}')
    assert env_only != rubric.source
    report = dry_run(rubric.source, env_only, groups)
    paid = [t.total_reward for group in reversed(rollouts.groups) for t in group]  # newest group first
    assert any(paid)  # some episode was solved: a 0 for every episode would fail below
    assert [r for g in report.groups for r in g.new_rewards] == pytest.approx(paid)
