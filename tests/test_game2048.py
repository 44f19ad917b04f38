"""The 2048 scenario: board rules, the environment, splits, warm-start data and rubric."""

import random

import pytest

from rlab.engine.rewards.rubric import load_rubric
from rlab.engine.policy.tiny import build_tokenizer
from rlab.scenarios.game2048 import SCENARIO
from rlab.scenarios.game2048.board import from_text, legal_moves, move, new_board, slide_line, spawn, to_text
from rlab.scenarios.game2048.env import Game2048Env, parse_move
from rlab.scenarios.game2048.rewards import legal_moves as legal_moves_score
from rlab.scenarios.game2048.rewards import max_tile


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ([1, 1, 1, 0], ([2, 1, 0, 0], [2])),
        ([1, 1, 2, 2], ([2, 3, 0, 0], [2, 3])),
        ([2, 0, 2, 3], ([3, 3, 0, 0], [3])),  # a merged tile does not merge again
        ([0, 0, 0, 1], ([1, 0, 0, 0], [])),
        ([1, 2, 1, 2], ([1, 2, 1, 2], [])),
    ],
)
def test_slide_line_merges_each_pair_once(line, expected):
    assert slide_line(line) == expected


def test_moves_in_all_four_directions():
    board = from_text("11../..2./..2./....")
    assert move(board, "l") == (from_text("2.../2.../2.../...."), [2])
    assert move(board, "r") == (from_text("...2/...2/...2/...."), [2])
    assert move(board, "u") == (from_text("113./..../..../...."), [3])
    assert move(board, "d") == (from_text("..../..../..../113."), [3])
    with pytest.raises(ValueError, match="unknown move 'x'"):
        move(board, "x")


def test_legal_moves_and_a_dead_board():
    assert legal_moves(from_text("1.../..../..../....")) == ["r", "d"]
    assert legal_moves(from_text("1212/2121/1212/2121")) == []


def test_spawn_new_board_and_text_round_trip():
    board = new_board(random.Random(7))
    assert board == new_board(random.Random(7))
    assert sum(v > 0 for v in board) == 2 and set(board) <= {0, 1, 2}
    assert from_text(to_text(board)) == board
    values = [max(spawn((0,) * 16, random.Random(s))) for s in range(400)]
    assert 0.8 < values.count(1) / 400 < 0.97 and set(values) == {1, 2}  # 2s at ~0.9, else 4s
    with pytest.raises(ValueError, match="full board"):
        spawn((1,) * 16, random.Random(0))
    with pytest.raises(ValueError, match="not a board"):
        from_text("1.../....")


@pytest.mark.parametrize(
    ("text", "expected"), [("l", "l"), (" R\n", "r"), ("Up", "u"), ("down", "d"), ("ld", None), ("", None)]
)
def test_parse_move(text, expected):
    assert parse_move(text) == expected


def test_same_seed_same_start_and_same_moves_same_boards():
    a, b = Game2048Env(8), Game2048Env(8)
    assert a.reset({"id": "s", "seed": 11}) == b.reset({"id": "s", "seed": 11})
    for m in ("l", "u", "r"):
        if m in legal_moves(a.board):
            assert a.step(m) == b.step(m)


def test_reward_is_scaled_log2_of_merged_tiles_and_spawn_follows():
    env = Game2048Env(8)
    env.reset({"id": "s", "seed": 0})
    env.board = from_text("11../22../..../....")
    observation, reward, done, key = env.step("left")
    assert reward == pytest.approx(0.1 * (2 + 3))  # a 4 and an 8 made
    assert not env.invalid and not done and key == env.board
    assert sum(v > 0 for v in key) == 3  # two merged tiles plus one spawned
    assert observation == [{"role": "user", "content": f"{to_text(key)}?"}]


def test_illegal_move_is_invalid_keeps_the_board_and_the_spawn_stream():
    env, twin = Game2048Env(8), Game2048Env(8)
    env.reset({"id": "s", "seed": 3})
    twin.reset({"id": "s", "seed": 3})
    board = env.board = twin.board = from_text("1.../..../..../....")
    observation, reward, done, key = env.step("l")  # nothing can slide left
    assert env.invalid and key == board and reward == 0.0 and not done
    assert observation[0]["content"] == f"bad {to_text(board)}?"
    env.step("what")
    assert env.invalid
    legal = legal_moves(board)[0]
    assert env.step(legal)[3] == twin.step(legal)[3]  # invalid turns drew no tiles


def test_episode_ends_at_the_turn_limit_with_the_max_tile_bonus():
    env = Game2048Env(2)
    env.reset({"id": "s", "seed": 0})
    env.board = from_text("1.../..../..../....")
    env.step("r")
    observation, reward, done, key = env.step("zz")
    assert done and observation[0]["content"].endswith(" end")
    assert reward == pytest.approx(0.1 * max(key))


def test_episode_ends_when_no_move_is_left():
    env = Game2048Env(8)
    env.reset({"id": "s", "seed": 0})
    env.board = from_text("1212/2121/4212/345.")  # only r and d are legal
    observation, reward, done, key = env.step("r")
    assert done and legal_moves(key) == []
    assert reward == pytest.approx(0.5)  # no merge; max tile 2**5 -> 0.5
    assert observation[0]["content"] == f"{to_text(key)} end"


def test_reset_rejects_examples_without_a_seed():
    with pytest.raises(ValueError, match="integer 'seed'"):
        Game2048Env(8).reset({"id": "broken"})


def test_splits_are_disjoint_fixed_and_seeded():
    held_out = SCENARIO.eval_examples()
    assert held_out == SCENARIO.eval_examples() and len(held_out) == 100
    train = SCENARIO.train_examples(0)
    assert train == SCENARIO.train_examples(0) and train != SCENARIO.train_examples(1)
    assert not {e["seed"] for e in held_out} & {e["seed"] for e in train}
    example = train[0]
    observation, _ = SCENARIO.make_env(example).reset(example)
    assert observation[0]["content"] == example["prompt"]


def test_sft_pairs_are_legal_moves_in_short_contexts():
    pairs = SCENARIO.sft_pairs(0)
    assert pairs == SCENARIO.sft_pairs(0) and len(pairs) > 3000
    for context, action in pairs[:300]:
        board = from_text(context.rsplit("</s>", 1)[-1][-20:-1])
        assert action in legal_moves(board)
    tokenizer = build_tokenizer()
    assert max(len(tokenizer.encode(c, add_special_tokens=False)) for c, _ in pairs) < 256


def test_rubric_scores_max_tile_and_legality():
    transcript = [
        {"role": "user", "content": "1.../..../..../....?"},
        {"role": "assistant", "content": "l"},
        {"role": "user", "content": "bad 1.../..../..../....?"},
        {"role": "assistant", "content": "r"},
        {"role": "user", "content": "..1./..../..../...4 end"},
    ]
    scored = max_tile({}, transcript)
    assert scored == {"reward": pytest.approx(4 / 11), "details": {"parse_status": "ok", "max_tile": 16}}
    assert legal_moves_score({}, transcript)["reward"] == 0.5
    assert max_tile({}, [{"role": "user", "content": "hello"}])["details"]["parse_status"] == "no_board"
    rubric = load_rubric(SCENARIO.reward_file)
    assert rubric.weights == {"max_tile": 1.0, "legal_moves": 0.0, "env_reward": 0.0}
    assert rubric.score_group([{}], [transcript])[0].reward == pytest.approx(4 / 11)
