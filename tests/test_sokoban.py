"""The sokoban scenario: gym-sokoban's rooms and step() played as text turns (issue 32)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from test_multiturn import ScriptedPolicy

from rlab.engine.run.config import RunConfig
from rlab.engine.rewards.rubric import load_rubric
from rlab.engine.rollout.episodes import run_group
from rlab.engine.step import run
from rlab.engine.train.gigpo import gigpo_group
from rlab.engine.types import MultiStepScenario
from rlab.scenarios.levels import SeedSplits
from rlab.scenarios.sokoban import SCENARIO
from rlab.scenarios.sokoban.env import SYMBOLS, level, library, parse_action, render
from rlab.store.reader import StoreReader

CODES = {symbol: code for code, symbol in SYMBOLS.items()}
SEEDS = [1_000_003, 1_234_567, 1_999_999, 42, 7, 123_456]


def decode(grid: str, dim: int) -> np.ndarray:
    """A rendered room back to gym-sokoban's room_state codes (border walls added back)."""
    inner = [[CODES[ch] for ch in line] for line in grid.splitlines()]
    room = np.zeros((dim, dim), dtype=int)
    room[1:-1, 1:-1] = np.where(np.array(inner) == 6, 5, np.array(inner))
    return room


def library_env(seed: int):
    """gym-sokoban's SokobanEnv reset the library's way: its reset() draws the room
    from the global random streams, here seeded with the level's seed."""
    class Plain(library().sokoban_env.SokobanEnv):
        def render(self, *args, **kwargs):  # the RGB frame is not loaded (see scenarios/sokoban/env.py)
            return None

    env = Plain(dim_room=(6, 6), max_steps=SCENARIO.max_turns, num_boxes=1, reset=False)
    saved = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed)
    try:
        env.reset()
    finally:
        random.setstate(saved[0])
        np.random.set_state(saved[1])
    return env


@pytest.mark.parametrize("seed", SEEDS)
def test_rooms_and_transitions_are_gym_sokobans_own(seed):
    """The room of a seed is the one gym-sokoban's own reset() draws from that seed,
    and random replies (moves, words, junk) step it exactly as the library's step()
    does with the same actions: the same room, reward and ending every turn."""
    reference = library_env(seed)
    room_fixed, room_state = level(6, 1, seed)
    assert (room_fixed == reference.room_fixed).all() and (room_state == reference.room_state).all()
    example = SCENARIO.example(seed)
    env = SCENARIO.make_env(example)
    observation, key = env.reset(example)
    assert observation[0]["content"] == key == example["prompt"]
    assert (decode(key, 6) == reference.room_state).all()
    rng = random.Random(seed)
    replies = ["u", "d", "l", "r", "u", "d", "l", "r", "Up", "left.", "?", ""]
    done, turns = False, 0
    while not done:
        reply = rng.choice(replies)
        observation, reward, done, key = env.step(reply)
        turns += 1
        action = parse_action(reply)
        assert env.invalid == (action is None)
        _, expected_reward, expected_done, _ = reference.step(0 if action is None else action)
        assert (reward, done) == (expected_reward, expected_done)
        assert (decode(key, 6) == reference.room_state).all()
        if done:
            solved = reference._check_if_all_boxes_on_target()
            assert observation[0]["content"] == ("solved" if solved else "lost")
            assert solved or turns == SCENARIO.max_turns
    assert turns <= SCENARIO.max_turns


def test_a_room_is_a_pure_function_of_its_seed_and_leaves_the_global_streams_alone():
    random.seed(5)
    np.random.seed(5)
    before = random.random(), np.random.random()
    random.seed(5)
    np.random.seed(5)
    level.cache_clear()
    first = [render(*level(6, 1, seed)) for seed in (11, 12, 13)]
    assert (random.random(), np.random.random()) == before
    level.cache_clear()
    assert [render(*level(6, 1, seed)) for seed in (11, 12, 13)] == first


def test_rendering_and_parsing():
    room_fixed = np.array([[0] * 5, [0, 1, 2, 1, 0], [0, 1, 1, 1, 0], [0, 2, 1, 1, 0], [0] * 5])
    room_state = np.array([[0] * 5, [0, 4, 2, 5, 0], [0, 1, 1, 1, 0], [0, 5, 3, 1, 0], [0] * 5])
    room_state[3, 1] = 5  # the player on a target
    room_state[1, 3] = 1
    assert render(room_fixed, room_state) == "XO_\n___\nS*_\n"
    assert [parse_action(t) for t in ("u", "d", "l", "r", "DOWN", "right.")] == [1, 2, 3, 4, 2, 4]
    assert [parse_action(t) for t in ("", "x", "ud", "push up")] == [None] * 4


def test_scenario_splits_and_anchor_states():
    assert isinstance(SCENARIO, MultiStepScenario) and SCENARIO.name == "sokoban"
    held_out = SCENARIO.eval_examples()
    assert len(held_out) == 100 and all(1_000_000 <= ex["level_seed"] < 2_000_000 for ex in held_out)
    example = held_out[0]
    rng = random.Random(0)
    policy = ScriptedPolicy(lambda conversation: rng.choice("udlr"))
    episodes = run_group(policy, SCENARIO.make_env, example, 8, max_turns=SCENARIO.max_turns, max_new_tokens=2,
                         temperature=1.0, system_prompt=SCENARIO.system_prompt)
    for episode in episodes:  # each turn's key is the room it acted in, as the policy saw it
        seen = [m["content"] for m in episode.messages if m["role"] == "user"]
        assert episode.state_keys == [text.removeprefix("bad\n") for text in seen[: len(episode.turns)]]
    assert (gigpo_group(episodes).anchor_size_flat > 1).mean() > 0.5
    examples = [{**example, "_env_rewards": ep.step_rewards} for ep in episodes]  # as the engine hands them
    scores = load_rubric(SCENARIO.reward_file).score_group(examples, [ep.messages for ep in episodes])
    assert [s.reward for s in scores] == pytest.approx([ep.total_reward for ep in episodes])
    assert all(s.components["solved"] == (ep.messages[-1]["content"] == "solved") for s, ep in zip(scores, episodes))


@pytest.mark.slow
def test_train_split_skips_held_out_rooms_and_warm_start_moves_change_the_room():
    held_out = {ex["prompt"] for ex in SCENARIO.eval_examples()}
    train = SCENARIO.train_examples(0)
    assert len(train) == 1000 and all(ex["level_seed"] < 1_000_000 for ex in train)
    assert not held_out & {ex["prompt"] for ex in train}
    for context, move in SCENARIO.sft_pairs(0)[:200]:
        assert context.startswith(SCENARIO.system_prompt) and move in "udlr"


def test_a_headless_run_trains_on_gym_sokobans_reward(tmp_path, raw_tiny_model_dir, monkeypatch):
    # 20 rooms, not 1,000 (6 ms each)
    monkeypatch.setattr("rlab.scenarios.sokoban.LEVELS", SeedSplits(held_out_seed=6174, train_size=20))
    db = tmp_path / "sk.db"
    summary = run(RunConfig(scenario="sokoban", advantage="grpo", model=raw_tiny_model_dir, db=db,
                            max_steps=2, prompts_per_step=2, group_size=4, eval_size=4, eval_every=2,
                            max_new_tokens=2))
    assert summary["status"] == "finished" and summary["steps"] == 2
    reader = StoreReader(db)
    group = reader.group(reader.groups_of_step(summary["run_id"], 1)[0]["id"])
    assert group is not None
    for trajectory in group["trajectories"]:  # gym-sokoban's reward: -0.1 a step, +1 / +10 on the target
        assert trajectory["reward"] <= 11 and "solved" in trajectory["details"]
