"""The maze scenario: a fixed grid whose cells recur (GiGPO's anchor states)."""

import random
import re

from test_multiturn import ScriptedPolicy

from rlab.engine.rewards.rubric import load_rubric
from rlab.engine.rollout.episodes import run_group
from rlab.engine.train.advantages import gigpo_group
from rlab.scenarios import get_scenario
from rlab.scenarios.imitation import EOS_TEXT
from rlab.scenarios.maze import SCENARIO, STARTS
from rlab.scenarios.maze.env import SMALL

GOAL, legal_moves = SMALL.goal, SMALL.legal_moves



def cell_of(conversation):
    row, col = re.findall(r"(?:at|bump) (\d)(\d)\?", conversation)[-1]
    return int(row), int(col)


def test_splits_walls_and_a_walk_to_the_goal():
    assert get_scenario("maze") is SCENARIO and SCENARIO.multi_step
    assert [ex["start"] for ex in SCENARIO.eval_examples()] == [list(c) for c in STARTS] and len(STARTS) == 17
    assert SCENARIO.train_examples(1) == SCENARIO.train_examples(1) != SCENARIO.train_examples(2)
    env = SCENARIO.make_env({})
    obs, key = env.reset({"id": "x", "start": [0, 4]})
    assert obs[0]["content"] == "at 04?" and key == (0, 4)
    obs, reward, done, key = env.step("u")  # the edge: invalid, state kept
    assert env.invalid and obs[0]["content"] == "bump 04?" and (reward, done, key) == (0.0, False, (0, 4))
    for move in "dddd":
        obs, reward, done, key = env.step(move)
    assert (obs[0]["content"], reward, done, key) == ("goal", 1.0, True, GOAL)


def test_random_walks_share_anchor_states_and_the_rubric_scores_them():
    rng = random.Random(0)
    policy = ScriptedPolicy(lambda conversation: rng.choice(legal_moves(cell_of(conversation))))
    example = SCENARIO.eval_examples()[0]
    episodes = run_group(policy, SCENARIO.make_env, example, 8, max_turns=SCENARIO.max_turns, max_new_tokens=2,
                         temperature=1.0, system_prompt=SCENARIO.system_prompt)
    result = gigpo_group(episodes)
    assert (result.anchor_size_flat > 1).mean() > 0.8  # cells recur: most turns share an anchor group
    scores = load_rubric(SCENARIO.reward_file).score_group([example] * 8, [ep.messages for ep in episodes])
    assert [s.reward for s in scores] == [ep.total_reward for ep in episodes]


def test_warm_start_contexts_open_with_the_system_prompt_and_end_in_a_cell():
    pairs = SCENARIO.sft_pairs(0)
    assert pairs == SCENARIO.sft_pairs(0) and len(pairs) > 2000
    for context, move in pairs[:300]:
        assert context.startswith(SCENARIO.system_prompt) and move in legal_moves(cell_of(context))
        assert context.count(EOS_TEXT) == len(re.findall(r"\d\d\?", context)) - 1


def test_the_large_maze_is_solvable_in_its_budget_but_random_walks_rarely_make_it():
    large = get_scenario("maze_large")
    grid = large.grid
    assert large.system_prompt == "Maze, goal at 66. Reply u, d, l or r.\n" and large.reward_file == SCENARIO.reward_file
    assert [ex["start"] for ex in large.eval_examples()] == [list(c) for c in grid.starts] and len(grid.starts) == 31
    assert max(grid.distance[c] for c in grid.starts) == large.max_turns  # every start can reach the goal, just
    rng, reached = random.Random(0), 0
    for start in grid.starts * 40:
        env = large.make_env({})
        env.reset({"id": "x", "start": list(start)})
        done = reward = 0.0
        while not done:
            _, reward, done, _ = env.step(rng.choice(grid.legal_moves(env.cell)))
        reached += reward
    assert 0.03 < reached / (len(grid.starts) * 40) < 0.2  # sparse: GRPO's groups are mostly all-zero
