"""The frozenlake scenarios: gymnasium's FrozenLake-v1 played as text turns (issue 32)."""

from __future__ import annotations

import random

import gymnasium
import pytest
from gymnasium.envs.toy_text.frozen_lake import generate_random_map
from test_multiturn import ScriptedPolicy

from rlab.engine.run.config import RunConfig
from rlab.engine.rewards.rubric import load_rubric
from rlab.engine.rollout.episodes import run_group
from rlab.engine.step import run
from rlab.engine.train.gigpo import gigpo_group
from rlab.engine.types import MultiStepScenario
from rlab.scenarios import get_scenario
from rlab.scenarios.frozenlake import SCENARIO
from rlab.scenarios.frozenlake.env import level_map, parse_action, render
from rlab.store.reader import StoreReader

LAKES = ["frozenlake", "frozenlake_slippery", "frozenlake_8x8"]


def position_of(grid: str) -> int:
    """The player's cell (row * ncol + col) in a rendered map."""
    rows = grid.splitlines()
    row = next(r for r, line in enumerate(rows) if "P" in line)
    return row * len(rows[0]) + rows[row].index("P")


@pytest.mark.parametrize("name", LAKES)
def test_transitions_are_gymnasiums_own_step(name):
    """Random replies (moves, words, junk) on several levels: every reward, ending
    and position equals gymnasium's FrozenLake-v1 stepped with the same actions."""
    scenario = get_scenario(name)
    assert isinstance(scenario, MultiStepScenario) and scenario.multi_step
    rng = random.Random(name)
    replies = ["u", "d", "l", "r", "Left", "down.", "?", "ud", ""]
    for example in scenario.eval_examples()[:6]:
        seed = example["level_seed"]
        desc = level_map(scenario.size, scenario.p, seed)
        assert list(desc) == generate_random_map(size=scenario.size, p=scenario.p, seed=seed)  # gymnasium's map
        library = gymnasium.make("FrozenLake-v1", desc=list(desc), is_slippery=scenario.is_slippery,
                                 max_episode_steps=scenario.max_turns)
        state, _ = library.reset(seed=seed)
        env = scenario.make_env(example)
        observation, key = env.reset(example)
        assert observation[0]["content"] == key == example["prompt"] and position_of(key) == state == 0
        done, turns = False, 0
        while not done:
            reply = rng.choice(replies)
            observation, reward, done, key = env.step(reply)
            turns += 1
            action = parse_action(reply)
            assert env.invalid == (action is None)
            expected_reward, terminated, truncated = 0.0, False, False
            if action is not None:
                state, expected_reward, terminated, truncated, _ = library.step(action)
            assert position_of(key) == state and reward == expected_reward
            text = observation[0]["content"]
            if terminated:
                assert done and text == ("goal" if expected_reward else "hole")
            elif done:
                assert text == "lost" and turns == scenario.max_turns
            else:
                assert text == ("bad\n" if env.invalid else "") + key
        assert turns <= scenario.max_turns


def test_rendering_and_parsing():
    desc = ("SFFH", "FHFF", "FFFF", "HFFG")
    assert render(desc, 0) == "P__O\n_O__\n____\nO__G\n"
    assert render(desc, 6) == "___O\n_OP_\n____\nO__G\n"
    assert [parse_action(t) for t in ("l", "d", "r", "u", " Up ", "RIGHT.", "left!")] == [0, 1, 2, 3, 3, 2, 0]
    assert [parse_action(t) for t in ("", "x", "ud", "go up", "u d", "1")] == [None] * 6


def test_splits_never_share_a_seed_or_a_map_and_are_deterministic():
    held_out = SCENARIO.eval_examples()
    assert len(held_out) == 100 and held_out == SCENARIO.eval_examples()
    assert all(1_000_000 <= ex["level_seed"] < 2_000_000 for ex in held_out)
    train = SCENARIO.train_examples(0)
    assert train == SCENARIO.train_examples(0) != SCENARIO.train_examples(1)
    assert len(train) == 2000 and all(ex["level_seed"] < 1_000_000 for ex in train)
    held_out_maps = {level_map(4, 0.8, ex["level_seed"]) for ex in held_out}
    assert not held_out_maps & {level_map(4, 0.8, ex["level_seed"]) for ex in train}


def test_anchor_states_are_the_rendered_maps_and_random_walks_share_them():
    example = SCENARIO.eval_examples()[0]
    rng = random.Random(0)
    policy = ScriptedPolicy(lambda conversation: rng.choice("udlr"))
    episodes = run_group(policy, SCENARIO.make_env, example, 8, max_turns=SCENARIO.max_turns, max_new_tokens=2,
                         temperature=1.0, system_prompt=SCENARIO.system_prompt)
    assert {ep.initial_state_key for ep in episodes} == {example["prompt"]}
    for episode in episodes:  # each turn's key is the map it acted on, as the policy saw it
        seen = [m["content"] for m in episode.messages if m["role"] == "user"]
        assert episode.state_keys == [text.removeprefix("bad\n") for text in seen[: len(episode.turns)]]
    result = gigpo_group(episodes)
    assert (result.anchor_size_flat > 1).mean() > 0.5  # the start, and cells walked back to
    examples = [{**example, "_env_rewards": ep.step_rewards} for ep in episodes]  # as the engine hands them
    scores = load_rubric(SCENARIO.reward_file).score_group(examples, [ep.messages for ep in episodes])
    assert [s.reward for s in scores] == [ep.total_reward for ep in episodes]
    assert [s.components["reached"] for s in scores] == [ep.total_reward for ep in episodes]


def test_warm_start_plays_random_moves_that_stay_on_the_map():
    pairs = SCENARIO.sft_pairs(0)
    assert pairs == SCENARIO.sft_pairs(0) and len(pairs) > 2000
    for context, move in pairs[:200]:
        assert context.startswith(SCENARIO.system_prompt) and context.endswith("\n") and move in "udlr"
        grid = context.split("</s>")[-1].removeprefix(SCENARIO.system_prompt)
        row, col = divmod(position_of(grid), 4)
        assert (move, row) != ("u", 0) and (move, row) != ("d", 3) and (move, col) != ("l", 0)
        assert (move, col) != ("r", 3)


def test_a_headless_gigpo_run_trains_and_stores_map_anchors(tmp_path, raw_tiny_model_dir):
    db = tmp_path / "fl.db"
    summary = run(RunConfig(scenario="frozenlake", advantage="gigpo", model=raw_tiny_model_dir, db=db,
                            max_steps=2, prompts_per_step=2, group_size=4, eval_size=4, eval_every=2,
                            max_new_tokens=2))
    assert summary["status"] == "finished" and summary["steps"] == 2
    reader = StoreReader(db)
    group = reader.group(reader.groups_of_step(summary["run_id"], 1)[0]["id"])
    assert group is not None and group["example"]["level_seed"] < 1_000_000
    shares = reader.anchor_share_by_step(summary["run_id"])
    assert [row["step"] for row in shares] == [1, 2] and all(0 <= row["share"] <= 1 for row in shares)
