"""The number-guessing scenario: rules, splits, warm-start data and rubric."""

import itertools
import re

import pytest

from rlab.engine.rewards.rubric import load_rubric
from rlab.engine.policy.tiny import build_tokenizer
from rlab.scenarios.imitation import EOS_TEXT
from rlab.scenarios.number_guess import N, SCENARIO
from rlab.scenarios.number_guess.env import NumberGuessEnv
from rlab.scenarios.number_guess.rewards import solved


def play(env, secret, guesses):
    env.reset({"id": "x", "secret": secret})
    return [env.step(g) for g in guesses]


def test_answers_narrow_the_interval_and_the_state_key_follows():
    env = NumberGuessEnv(32, 7)
    observation, key = env.reset({"id": "x", "secret": 10})
    assert observation == [{"role": "user", "content": "1..32?"}] and key == (1, 32)
    steps = play(env, 10, ["16", " 4 ", "12", "10"])
    assert [s[0][0]["content"] for s in steps] == ["lower 1..15?", "higher 5..15?", "lower 5..11?", "correct"]
    assert [s[3] for s in steps[:3]] == [(1, 15), (5, 15), (5, 11)]
    assert [s[1] for s in steps] == [0.0, 0.0, 0.0, 1.0]
    assert [s[2] for s in steps] == [False, False, False, True]


def test_guess_outside_the_interval_is_legal_but_teaches_nothing():
    env = NumberGuessEnv(32, 7)
    steps = play(env, 20, ["16", "3"])
    assert steps[1][0][0]["content"] == "higher 17..32?" and steps[1][3] == (17, 32)
    assert not env.invalid


@pytest.mark.parametrize("action", ["sixteen", "16.5", "", "0", "33", "16 17"])
def test_bad_guesses_are_invalid_and_keep_the_state(action):
    env = NumberGuessEnv(32, 7)
    (observation, reward, done, key), = play(env, 20, [action])
    assert env.invalid and observation[0]["content"] == "bad guess 1..32?"
    assert (reward, done, key) == (0.0, False, (1, 32))


def test_turn_limit_counts_every_turn_and_reveals_the_secret():
    env = NumberGuessEnv(32, 3)
    steps = play(env, 20, ["x", "1", "2"])
    assert steps[-1][0][0]["content"] == "lost, it was 20" and steps[-1][2]
    assert not any(s[2] for s in steps[:-1])


def test_reset_rejects_examples_without_a_secret():
    with pytest.raises(ValueError, match="integer 'secret' in 1..32"):
        NumberGuessEnv(32, 7).reset({"id": "broken", "secret": 40})


def test_binary_search_wins_every_held_out_example_within_the_limit():
    for example in SCENARIO.eval_examples():
        env = SCENARIO.make_env(example)
        env.reset(example)
        for _ in range(SCENARIO.max_turns):
            _, reward, done, _ = env.step(str((env.lo + env.hi) // 2))
            if done:
                break
        assert reward == 1.0, example["id"]


def test_splits_are_fixed_or_seeded():
    held_out = SCENARIO.eval_examples()
    assert [e["secret"] for e in held_out] == list(range(1, N + 1))
    train = SCENARIO.train_examples(0)
    assert train == SCENARIO.train_examples(0) and train != SCENARIO.train_examples(1)
    assert len({e["id"] for e in train}) == len(train)
    assert all(e["prompt"] == f"1..{N}?" and e["answer"] == str(e["secret"]) for e in train)


def test_sft_pairs_replay_legal_play_as_the_tiny_model_sees_it():
    pairs = SCENARIO.sft_pairs(0)
    assert pairs == SCENARIO.sft_pairs(0) and len(pairs) > 3000
    for context, guess in pairs[:400]:
        lo, hi = map(int, re.findall(r"(\d+)\.\.(\d+)\?", context)[-1])
        assert lo <= int(guess) <= hi
        assert context.count(EOS_TEXT) == len(re.findall(r"\d+\.\.\d+\?", context)) - 1
        assert context.startswith(SCENARIO.system_prompt)  # the run's prompt opens every episode
    tokenizer = build_tokenizer()
    assert max(len(tokenizer.encode(c, add_special_tokens=False)) for c, _ in pairs) < 256


def test_sft_contexts_tokenize_like_the_chat_template_renders_the_episode():
    tokenizer = build_tokenizer()
    example = SCENARIO.train_examples(0)[0]
    pairs = SCENARIO.sft_pairs(0)
    env = SCENARIO.make_env(example)
    messages = [{"role": "system", "content": SCENARIO.system_prompt}, *env.reset(example)[0]]  # as a run sends it
    first_episode = [pairs[0], *itertools.takewhile(lambda p: p[0] != pairs[0][0], pairs[1:])]
    assert len(first_episode) >= 2
    for context, guess in first_episode:
        rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
        assert list(rendered) == tokenizer.encode(context, add_special_tokens=False)
        observation, _, done, _ = env.step(guess)
        messages += [{"role": "assistant", "content": guess}, *observation]
    assert done


def test_rubric_scores_the_transcript():
    won = [{"role": "user", "content": "1..32?"}, {"role": "assistant", "content": "16"},
           {"role": "user", "content": "correct"}]
    lost = won[:2] + [{"role": "user", "content": "lost, it was 3"}]
    cut = won[:2] + [{"role": "user", "content": "lower 1..15?"}]
    assert solved({}, won) == {"reward": 1.0, "details": {"parse_status": "ok", "guesses": 1}}
    assert solved({}, lost)["details"]["parse_status"] == "lost" and solved({}, lost)["reward"] == 0.0
    assert solved({}, cut)["details"]["parse_status"] == "unfinished"
    rubric = load_rubric(SCENARIO.reward_file)
    assert rubric.weights == {"solved": 1.0, "env_reward": 0.0}
    assert [r.reward for r in rubric.score_group([{}, {}], [won, lost])] == [1.0, 0.0]
