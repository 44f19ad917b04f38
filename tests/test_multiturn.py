"""The multi-turn runner: batching, identical starts, invalid actions, truncation, state keys.

The policies here are scripted test doubles implementing the policy
interface of docs/interfaces.md (``render`` / ``sample``): characters are
token ids, and the action is computed from the rendered conversation. One
test runs the real ``engine.policy.model.Policy`` on an untrained tiny model.
"""

import hashlib
import random
import re

import numpy as np
import pytest
import torch

from rlab.engine.rollout.episodes import InitialStateMismatch, observation_key, run_episodes, run_group
from rlab.engine.train.gigpo import batch_advantages, gigpo_group
from rlab.engine.train.batch import train_samples
from rlab.engine.types import Sample
from rlab.scenarios.game2048 import SCENARIO as GAME2048
from rlab.scenarios.game2048.board import from_text, legal_moves
from rlab.scenarios.game2048.env import Game2048Env
from rlab.scenarios.number_guess import SCENARIO as GUESS

SEP = "|"


class ScriptedPolicy:
    """Renders messages as character codes; ``act(conversation_text)`` picks the reply."""

    def __init__(self, act):
        self.act = act
        self.batch_sizes: list[int] = []

    def render(self, messages, tools=None):
        return [ord(c) for c in SEP.join(m["content"] for m in messages)]

    def sample(self, prompt_ids, *, max_new_tokens, temperature, cache=None):
        self.batch_sizes.append(len(prompt_ids))
        samples = []
        for prompt in prompt_ids:
            text = self.act("".join(map(chr, prompt)))
            ids = [ord(c) for c in text][:max_new_tokens]
            samples.append(Sample(ids, "".join(map(chr, ids)), [-0.5] * len(ids), len(text) > max_new_tokens))
        return samples


def last_interval(conversation):
    lo, hi = re.findall(r"(\d+)\.\.(\d+)\?", conversation)[-1]
    return int(lo), int(hi)


def bisect(conversation):
    lo, hi = last_interval(conversation)
    return str((lo + hi) // 2)


def run_guess(policy, secret=23, n=4, **kwargs):
    options = {"max_turns": GUESS.max_turns, "max_new_tokens": 4, "temperature": 1.0} | kwargs
    example = {"id": "t", "prompt": "1..63?", "answer": str(secret), "secret": secret}
    return run_group(policy, GUESS.make_env, example, n, **options)


def test_binary_search_solves_every_episode_from_the_same_start():
    policy = ScriptedPolicy(bisect)
    episodes = run_guess(policy, secret=23)
    for ep in episodes:
        assert ep.initial_state_key == (1, 63)
        assert ep.done and not ep.truncated
        # 32 -> lower 1..31, 16 -> higher 17..31, 24 -> lower 17..23, 20 -> higher 21..23,
        # 22 -> higher 23..23, 23 -> correct
        assert [t.text for t in ep.turns] == ["32", "16", "24", "20", "22", "23"]
        assert ep.state_keys == [(1, 63), (1, 31), (17, 31), (17, 23), (21, 23), (23, 23)]
        assert ep.step_rewards == [0.0, 0.0, 0.0, 0.0, 0.0, 1.0]
        assert ep.total_reward == 1.0 and ep.n_invalid == 0
        assert [m["role"] for m in ep.messages] == ["user"] + ["assistant", "user"] * 6
        assert ep.messages[-1]["content"] == "correct"
    assert policy.batch_sizes == [4] * 6  # one policy call per turn for all running episodes


def test_prompt_ids_are_the_context_before_each_turn():
    policy = ScriptedPolicy(bisect)
    ep = run_guess(policy, n=1, system_prompt="Guess.")[0]
    assert ep.messages[0] == {"role": "system", "content": "Guess."}
    for t, turn in enumerate(ep.turns):
        context = ep.messages[: 2 + 2 * t]  # system, first observation, then (assistant, user) pairs
        assert turn.prompt_ids == policy.render(context)
        assert turn.completion_ids == [ord(c) for c in turn.text]
        assert turn.logprobs == [-0.5] * len(turn.text)


def test_ragged_episodes_shrink_the_batch_as_they_finish():
    rng = random.Random(5)
    policy = ScriptedPolicy(lambda conv: str(rng.randint(*last_interval(conv))))
    episodes = run_guess(policy, secret=40, n=8)
    lengths = [len(ep.turns) for ep in episodes]
    assert len(set(lengths)) > 1
    # the batch at turn t holds exactly the episodes longer than t
    assert policy.batch_sizes == [sum(n > t for n in lengths) for t in range(max(lengths))]
    assert all(ep.done and not ep.truncated for ep in episodes)


def test_invalid_action_is_an_observation_plus_penalty_never_a_crash():
    replies = iter(["sixteen", "99"])
    policy = ScriptedPolicy(lambda conv: next(replies, None) or bisect(conv))
    ep = run_guess(policy, n=1, secret=32, invalid_penalty=0.25)[0]
    assert [t.invalid for t in ep.turns[:3]] == [True, True, False]
    assert ep.n_invalid == 2
    assert ep.turns[0].reward == -0.25 and ep.turns[1].reward == -0.25
    assert ep.turns[0].observation[0]["content"] == "bad guess 1..63?"
    assert ep.state_keys[:3] == [(1, 63), (1, 63), (1, 63)]  # the state did not move
    assert ep.done and ep.step_rewards == [-0.25, -0.25, 1.0]  # then 32 is right


def test_runner_truncates_at_max_turns_and_records_it():
    policy = ScriptedPolicy(lambda conv: "1")  # always too low for secret 23
    episodes = run_guess(policy, n=2, secret=23, max_turns=3)
    for ep in episodes:
        assert len(ep.turns) == 3 and ep.truncated and not ep.done
        assert ep.state_keys == [(1, 63), (2, 63), (2, 63)]


def test_environment_turn_limit_ends_the_episode_without_truncation():
    policy = ScriptedPolicy(lambda conv: "1")
    ep = run_guess(policy, n=1, secret=23)[0]
    assert len(ep.turns) == GUESS.max_turns and ep.done and not ep.truncated
    assert ep.messages[-1]["content"] == "lost, it was 23"


def test_long_completion_is_marked_truncated():
    policy = ScriptedPolicy(lambda conv: "16 is my guess")
    ep = run_guess(policy, n=1, max_turns=1, max_new_tokens=3)[0]
    assert ep.turns[0].truncated and ep.turns[0].text == "16 "


class DriftingEnv(Game2048Env):
    """A broken scenario: each instance re-seeds its board differently."""

    instances = 0

    def reset(self, example):
        DriftingEnv.instances += 1
        return super().reset({**example, "seed": example["seed"] + DriftingEnv.instances})


def test_different_initial_states_raise_a_clear_error():
    example = GAME2048.eval_examples()[0]
    with pytest.raises(InitialStateMismatch, match="seed the environment from the example"):
        run_group(ScriptedPolicy(lambda c: "l"), lambda ex: DriftingEnv(4), example, 3,
                  max_turns=2, max_new_tokens=2, temperature=1.0)


class CountdownEnv:
    """A scenario without state keys: counts down from example["start"]."""

    def __init__(self):
        self.invalid = False

    def reset(self, example):
        self.left = example["start"]
        return [{"role": "user", "content": f"{self.left} left"}], None

    def step(self, action):
        self.left -= 1
        return [{"role": "user", "content": f"{self.left} left"}], 1.0, self.left == 0, None


def test_missing_state_keys_default_to_a_hash_of_the_observation():
    eps = run_group(ScriptedPolicy(lambda c: "go"), lambda ex: CountdownEnv(), {"id": "c", "start": 2}, 2,
                    max_turns=5, max_new_tokens=2, temperature=1.0)
    expected = [hashlib.sha256(b"2 left").hexdigest()[:16], hashlib.sha256(b"1 left").hexdigest()[:16]]
    assert eps[0].state_keys == expected == eps[1].state_keys
    assert observation_key([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]) == \
        hashlib.sha256(b"a\nb").hexdigest()[:16]


def first_legal_move(conversation):
    board = from_text(re.findall(r"[.1-9a-f]{4}(?:/[.1-9a-f]{4}){3}", conversation)[-1])
    return legal_moves(board)[0]


def test_deterministic_play_on_2048_revisits_the_same_boards_in_every_episode():
    example = GAME2048.eval_examples()[3]
    episodes = run_group(ScriptedPolicy(first_legal_move), GAME2048.make_env, example, 3,
                         max_turns=GAME2048.max_turns, max_new_tokens=2, temperature=1.0)
    assert episodes[0].state_keys == episodes[1].state_keys == episodes[2].state_keys
    result = gigpo_group(episodes, gamma=0.95)
    assert np.all(result.anchor_size_flat >= 3)  # same seed + same moves -> same boards
    assert np.all(result.combined_flat == 0.0)  # identical episodes carry no signal


def test_train_samples_one_per_turn_with_its_advantage():
    rng = random.Random(1)
    policy = ScriptedPolicy(lambda conv: str(rng.randint(*last_interval(conv))))
    episodes = run_guess(policy, secret=5, n=4)
    result = gigpo_group(episodes, gamma=0.95, mode="mean_std_norm")
    samples = train_samples(episodes, result.combined)
    turns = [t for ep in episodes for t in ep.turns]
    assert len(samples) == len(turns)
    assert [s.advantage for s in samples] == pytest.approx(result.combined_flat.tolist())
    assert all(s.prompt_ids == t.prompt_ids and s.completion_ids == t.completion_ids for s, t in zip(samples, turns))
    with pytest.raises(ValueError, match="one value per turn"):
        train_samples(episodes, result.combined[:-1])


def test_run_episodes_batches_different_examples_for_evaluation():
    policy = ScriptedPolicy(bisect)
    examples = GUESS.eval_examples()
    episodes = run_episodes(policy, GUESS.make_env, examples, max_turns=GUESS.max_turns,
                            max_new_tokens=4, temperature=0.0)
    assert [ep.messages[-1]["content"] for ep in episodes] == ["correct"] * len(examples)
    assert policy.batch_sizes[0] == len(examples) and len(policy.batch_sizes) == 6
    assert sorted({len(ep.turns) for ep in episodes}) == [1, 2, 3, 4, 5, 6]


def test_batch_advantages_equal_per_group_advantages():
    rng = random.Random(2)
    policy = ScriptedPolicy(lambda conv: str(rng.randint(*last_interval(conv))))
    groups = [run_guess(policy, secret=s, n=4) for s in (3, 40, 63)]
    batch = batch_advantages(groups, gamma=0.9, mode="mean_std_norm")
    singles = [gigpo_group(g, gamma=0.9, mode="mean_std_norm") for g in groups]
    np.testing.assert_allclose(batch.combined_flat, np.concatenate([r.combined_flat for r in singles]))
    np.testing.assert_array_equal(batch.anchor_flat, np.concatenate([r.anchor_flat for r in singles]))
    assert batch.group.tolist() == [0] * 4 + [1] * 4 + [2] * 4


def test_bad_arguments_and_bad_policies_are_reported():
    with pytest.raises(ValueError, match="n >= 1"):
        run_guess(ScriptedPolicy(bisect), n=0)
    with pytest.raises(ValueError, match="invalid_penalty"):
        run_guess(ScriptedPolicy(bisect), invalid_penalty=-1.0)
    with pytest.raises(ValueError, match="max_turns must be >= 1"):
        run_guess(ScriptedPolicy(bisect), max_turns=0)
    with pytest.raises(ValueError, match="at least one example"):
        run_episodes(ScriptedPolicy(bisect), GUESS.make_env, [], max_turns=3, max_new_tokens=2, temperature=0.0)

    class Lossy(ScriptedPolicy):
        def sample(self, prompt_ids, **kwargs):
            return super().sample(prompt_ids, **kwargs)[:-1]

    with pytest.raises(ValueError, match="3 samples for 4 prompts"):
        run_guess(Lossy(bisect))


def test_real_tiny_policy_plays_without_crashing():
    from transformers import LlamaForCausalLM

    from rlab.engine.policy.model import Policy
    from rlab.engine.policy.tiny import build_config, build_tokenizer

    torch.manual_seed(0)
    tokenizer = build_tokenizer()
    policy = Policy(LlamaForCausalLM(build_config(len(tokenizer))), tokenizer, "cpu")
    episodes = run_guess(policy, n=3, max_turns=3, max_new_tokens=3, invalid_penalty=0.1)
    for ep in episodes:
        assert 1 <= len(ep.turns) <= 3
        for turn in ep.turns:
            assert turn.prompt_ids[: len(tokenizer.encode("1..63?", add_special_tokens=False))] == \
                tokenizer.encode("1..63?", add_special_tokens=False)
            assert len(turn.logprobs) == len(turn.completion_ids) >= 1
            if turn.invalid:  # an untrained model mostly emits junk: penalised, recorded
                assert turn.reward == -0.1 and turn.observation[0]["content"].startswith("bad guess")
            else:
                assert 1 <= int(turn.text) <= 63 and turn.reward in (0.0, 1.0)
