"""The maze scenario: a fixed grid whose cells recur (GiGPO's anchor states)."""

import random
import re

from test_multiturn import ScriptedPolicy

from rlab.engine.policy.tiny import build_config, build_tokenizer, context_tokens, model_key
from rlab.engine.rewards.rubric import load_rubric
from rlab.engine.rollout.episodes import run_group
from rlab.engine.train.gigpo import gigpo_group
from rlab.scenarios import get_scenario
from rlab.scenarios.imitation import EOS_TEXT, imitation_pairs
from rlab.scenarios.maze import SCENARIO
from rlab.scenarios.maze.env import SMALL

GOAL, STARTS, legal_moves = SMALL.goal, SMALL.starts, SMALL.legal_moves



def downhill(grid, cell):
    """The move from ``cell`` one step nearer the goal (down the BFS distance)."""
    return next(m for m in grid.legal_moves(cell) if grid.distance[grid.step(cell, m)] < grid.distance[cell])


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


def _walk(example, moves, scenario="maze_large"):
    """The transcript of playing ``moves`` from the example's start in
    ``scenario``'s environment for it, until the episode ends (OpenAI-style messages)."""
    env = get_scenario(scenario).make_env(example)
    messages, _ = env.reset(example)
    for move in moves:
        observation, _, done, _ = env.step(move)
        messages += [{"role": "assistant", "content": move}, *observation]
        if done:
            break
    return messages


def shortest_walk(grid, cell):
    """The moves of a shortest walk from ``cell`` to the goal (downhill on the BFS distance)."""
    moves = []
    while cell != grid.goal:
        moves.append(downhill(grid, cell))
        cell = grid.step(cell, moves[-1])
    return moves


def test_the_rubric_counts_the_moves_a_reached_walk_took_beyond_the_shortest():
    large = get_scenario("maze_large")
    grid = large.grid
    example = max(large.eval_examples(), key=lambda ex: ex["shortest"])
    assert example["shortest"] == grid.distance[tuple(example["start"])] == 14
    shortest = shortest_walk(grid, tuple(example["start"]))
    wall = next(m for m in "udlr" if m not in grid.legal_moves(tuple(example["start"])))
    rubric = load_rubric(large.reward_file)
    best, bumped, short = rubric.score_group([example] * 3, [_walk(example, shortest),
                                                             _walk(example, [wall] + shortest[:-1]),
                                                             _walk(example, shortest[:3])])
    assert best.reward == 1.0 and best.details["reached"]["excess_moves"] == 0
    assert bumped.reward == 0.0 and "excess_moves" not in bumped.details["reached"]  # 14 moves, one wasted
    assert short.reward == 0.0 and short.details["reached"]["parse_status"] == "unfinished"
    near = min(large.eval_examples(), key=lambda ex: ex["shortest"])
    start = tuple(near["start"])
    wall = next(m for m in "udlr" if m not in grid.legal_moves(start))
    step = downhill(grid, start)
    detour = rubric.score_group([near], [_walk(near, [wall, wall, step])])[0]
    assert detour.reward == 1.0 and detour.details["reached"]["excess_moves"] == 2


def test_the_tight_maze_allows_each_walk_two_moves_beyond_the_shortest():
    tight, large = get_scenario("maze_tight"), get_scenario("maze_large")
    assert tight.grid is large.grid and tight.system_prompt == large.system_prompt
    budgets = {ex["shortest"]: tight.make_env(ex).max_turns for ex in tight.eval_examples()}
    assert budgets[1] == 3 and budgets[14] == 16 and all(b == d + 2 for d, b in budgets.items())
    assert {large.make_env(ex).max_turns for ex in large.eval_examples()} == {14}  # no slack: one budget
    example = next(ex for ex in tight.eval_examples() if ex["shortest"] == 1)
    wall = next(m for m in "udlr" if m not in tight.grid.legal_moves(tuple(example["start"])))
    env = tight.make_env(example)
    env.reset(example)
    answers = [env.step(wall)[0][0]["content"] for _ in range(3)]
    assert answers == [f"bump {example['start'][0]}{example['start'][1]}?"] * 2 + ["lost"]


def test_the_loose_maze_pays_every_walk_that_arrives_and_only_gigpo_ranks_a_bump():
    loose = get_scenario("maze_loose")
    assert loose.grid is SMALL and {loose.make_env(ex).max_turns for ex in loose.eval_examples()} == {26}
    # The longest episode (26 bumps) fits the loose maze's tiny policy, not the default one.
    corner = {"id": "c", "start": [0, 0]}
    pairs = imitation_pairs(loose.make_env, [corner], lambda env: "u", loose.system_prompt)
    assert len(pairs) == 26
    tokens = build_tokenizer()(pairs[-1][0])["input_ids"]
    needed = len(tokens) + loose.run_defaults["max_new_tokens"]
    assert build_config(1).max_position_embeddings < needed <= build_config(1, context_tokens(loose)).max_position_embeddings
    key = model_key("maze_loose", 0, None, 150, loose.system_prompt)  # a default context keeps its old key
    assert key == model_key("maze_loose", 0, None, 150, loose.system_prompt, 256) != model_key(
        "maze_loose", 0, None, 150, loose.system_prompt, context_tokens(loose))
    # Two walks that both arrive: GRPO's episode advantage is 0 for both, but in
    # the start cell GiGPO ranks the progress move above the bump that wasted a move.
    def toward_goal(conversation):
        return downhill(SMALL, cell_of(conversation))

    def bump_once(conversation):
        return "u" if "bump" not in conversation else toward_goal(conversation)

    episodes = [run_group(ScriptedPolicy(act), loose.make_env, corner, 1, max_turns=26, max_new_tokens=2,
                          temperature=1.0, system_prompt=loose.system_prompt)[0] for act in (toward_goal, bump_once)]
    assert [ep.total_reward for ep in episodes] == [1.0, 1.0]
    assert [len(ep.turns) for ep in episodes] == [8, 9]
    result = gigpo_group(episodes)
    assert list(result.episode) == [0.0, 0.0] and not result.episode_turns_flat.any()
    direct, bumped = result.step
    assert direct[0] > 0 > bumped[0]  # both acted in cell 00; the bump's return is a move further off


def test_the_loose_strict_maze_trains_loose_and_holds_out_two_moves_beyond_the_shortest():
    strict, loose = get_scenario("maze_loose_strict"), get_scenario("maze_loose")
    assert strict.grid is loose.grid and strict.system_prompt == loose.system_prompt
    assert {strict.make_env(ex).max_turns for ex in strict.train_examples(0)[:200]} == {26}
    held_out = strict.eval_examples()
    assert [ex["start"] for ex in held_out] == [ex["start"] for ex in loose.eval_examples()]
    assert all(strict.make_env(ex).max_turns == ex["shortest"] + 2 for ex in held_out)
    # A held-out walk with one detour too many is lost; the same walk in training arrives.
    far = max(held_out, key=lambda ex: ex["shortest"])
    start = tuple(far["start"])
    wall = next(m for m in "udlr" if m not in SMALL.legal_moves(start))
    rubric = load_rubric(strict.reward_file)
    for example, bumps, reached in ((far, 2, 1.0), (far, 3, 0.0), ({**far, "slack": None}, 3, 1.0)):
        walk = _walk(example, [wall] * bumps + shortest_walk(SMALL, start), "maze_loose_strict")
        assert rubric.score_group([example], [walk])[0].reward == reached
