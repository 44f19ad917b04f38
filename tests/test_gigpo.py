"""GiGPO (Feng et al. 2025, arXiv 2505.10978) against hand-computed cases."""

import math

import numpy as np
import pytest

from rlab.engine.train.gigpo import gigpo, gigpo_batch

EPS = 1e-6

# Three episodes of different lengths; state "a" recurs across episodes, "b"
# recurs within episode 2, "d" is seen once. Reward 1 on some turns.
REWARDS = [[0.0, 0.0, 1.0], [0.0, 1.0], [0.0, 0.0, 0.0, 0.0]]
KEYS = [["a", "b", "c"], ["a", "c"], ["a", "b", "b", "d"]]


def assert_episodes(actual, expected):
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_recurring_states_within_and_across_episodes_gamma_one():
    res = gigpo(REWARDS, KEYS, gamma=1.0)
    # episode returns 1, 1, 0 -> mean 2/3
    np.testing.assert_allclose(res.episode_return, [1.0, 1.0, 0.0])
    np.testing.assert_allclose(res.episode, [1 / 3, 1 / 3, -2 / 3])
    assert_episodes(res.returns, [[1, 1, 1], [1, 1], [0, 0, 0, 0]])
    # anchors: a -> returns (1, 1, 0); b -> (1, 0, 0) incl. the revisit; c -> (1, 1); d alone
    assert_episodes(res.anchor, [[0, 1, 2], [0, 2], [0, 1, 1, 3]])
    assert_episodes(res.anchor_size, [[3, 3, 2], [3, 2], [3, 3, 3, 1]])
    assert_episodes(res.step, [[1 / 3, 2 / 3, 0], [1 / 3, 0], [-2 / 3, -1 / 3, -1 / 3, 0]])
    assert_episodes(res.combined, [[2 / 3, 1, 1 / 3], [2 / 3, 1 / 3], [-4 / 3, -1, -1, -2 / 3]])
    assert res.anchor_flat.dtype == np.int64 and res.step_flat.dtype == np.float64


def test_discounted_returns_and_omega_gamma_below_one():
    rewards = [[1.0, 0.0, 2.0], [0.0, 2.0]]
    keys = [["s", "t", "u"], ["s", "u"]]
    res = gigpo(rewards, keys, gamma=0.5, omega=2.0)
    # R = r_t + 0.5 R_{t+1}: (1 + 0.5 (0 + 0.5 * 2), 0 + 0.5 * 2, 2) and (0 + 0.5 * 2, 2)
    assert_episodes(res.returns, [[1.5, 1.0, 2.0], [1.0, 2.0]])
    # A^E uses the plain sums 3 and 2, not the discounted returns
    np.testing.assert_allclose(res.episode, [0.5, -0.5])
    # s: (1.5, 1.0) -> +-0.25; t alone -> 0; u: (2, 2) -> 0
    assert_episodes(res.step, [[0.25, 0.0, 0.0], [-0.25, 0.0]])
    assert_episodes(res.combined, [[1.0, 0.5, 0.5], [-1.0, -0.5]])


def test_mean_std_norm_divides_by_unbiased_std_plus_eps():
    res = gigpo(REWARDS, KEYS, gamma=1.0, mode="mean_std_norm")
    # returns (1, 1, 0): deviations (1/3, 1/3, -2/3), unbiased var (1/9+1/9+4/9)/2 = 1/3
    f = math.sqrt(1 / 3) + EPS
    np.testing.assert_allclose(res.episode, [1 / 3 / f, 1 / 3 / f, -2 / 3 / f])
    # a: same values as the episodes; b: (1, 0, 0) has the same std; c: std 0; d: size 1
    assert_episodes(res.step, [[1 / 3 / f, 2 / 3 / f, 0], [1 / 3 / f, 0], [-2 / 3 / f, -1 / 3 / f, -1 / 3 / f, 0]])


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_all_equal_returns_give_exact_zeros(mode):
    rewards = [[0.1, 0.1], [0.1, 0.1], [0.1, 0.1]]
    keys = [["x", "y"], ["x", "y"], ["x", "y"]]
    res = gigpo(rewards, keys, gamma=0.9, mode=mode)
    assert np.all(res.episode == 0.0)
    assert np.all(res.step_flat == 0.0)
    assert np.all(res.combined_flat == 0.0)
    no_eps = gigpo(rewards, keys, gamma=0.9, mode=mode, eps=0.0)
    assert np.all(no_eps.combined_flat == 0.0)  # 0 / 0 is taken as "no signal", not NaN


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_size_one_anchors_give_zero_step_advantage(mode):
    res = gigpo([[1.0, 0.0], [0.0, 3.0]], [["p", "q"], ["r", "s"]], mode=mode)
    assert np.all(res.anchor_size_flat == 1)
    assert np.all(res.step_flat == 0.0)
    np.testing.assert_array_equal(res.combined_flat, res.episode_turns_flat)


def test_single_episode_group_has_zero_episode_advantage_but_uses_revisits():
    res = gigpo([[1.0, 0.0, 0.0]], [["x", "y", "x"]], gamma=1.0)
    np.testing.assert_array_equal(res.episode, [0.0])
    # returns (1, 0, 0); x visited at t=0 (R=1) and t=2 (R=0) -> +-0.5; y alone
    assert_episodes(res.step, [[0.5, 0.0, -0.5]])


def test_episode_rewards_replace_the_summed_returns():
    res = gigpo(REWARDS, KEYS, gamma=1.0, episode_rewards=[0.0, 0.0, 3.0])
    np.testing.assert_allclose(res.episode, [-1.0, -1.0, 2.0])
    assert_episodes(res.step, gigpo(REWARDS, KEYS, gamma=1.0).step)  # A^S still from step rewards


def test_episode_turns_spread_the_episode_advantage_over_turns():
    res = gigpo(REWARDS, KEYS, gamma=1.0)
    assert_episodes(res.episode_turns, [[1 / 3] * 3, [1 / 3] * 2, [-2 / 3] * 4])
    no_step = gigpo(REWARDS, KEYS, gamma=1.0, omega=0.0)
    np.testing.assert_array_equal(no_step.combined_flat, res.episode_turns_flat)


def test_anchor_keys_are_exact_not_hash_equal():
    # hash(-1) == hash(-2) in CPython; they must stay different anchor states
    res = gigpo([[1.0], [0.0]], [[-1], [-2]])
    assert res.anchor_flat.tolist() == [0, 1]
    assert np.all(res.step_flat == 0.0)


def test_tuple_state_keys_match_by_value():
    board = (0, 2, 0, 4)
    res = gigpo([[1.0], [0.0]], [[board], [tuple([0, 2, 0, 4])]], gamma=1.0)
    assert res.anchor_size_flat.tolist() == [2, 2]
    np.testing.assert_allclose(res.step_flat, [0.5, -0.5])


def test_batch_matches_per_group_and_keeps_anchors_inside_groups():
    rng = np.random.default_rng(3)
    groups = []
    for _ in range(5):
        lengths = rng.integers(1, 6, size=4)
        groups.append(
            (
                [rng.integers(0, 3, size=n).astype(float).tolist() for n in lengths],
                [[int(k) for k in rng.integers(0, 4, size=n)] for n in lengths],
            )
        )
    flat_r = [x for r, _ in groups for ep in r for x in ep]
    flat_k = [x for _, k in groups for ep in k for x in ep]
    lengths = [len(ep) for r, _ in groups for ep in r]
    labels = [g for g, (r, _) in enumerate(groups) for _ in r]
    for mode in ("mean_norm", "mean_std_norm"):
        batch = gigpo_batch(flat_r, lengths, labels, flat_k, gamma=0.9, mode=mode)
        singles = [gigpo(r, k, gamma=0.9, mode=mode) for r, k in groups]
        for name in ("episode", "returns_flat", "step_flat", "combined_flat", "anchor_flat", "anchor_size_flat"):
            np.testing.assert_allclose(getattr(batch, name), np.concatenate([getattr(s, name) for s in singles]))
    assert batch.group.tolist() == [g for g in range(5) for _ in range(4)]


def test_batch_accepts_any_contiguous_labels_and_rejects_interleaved_groups():
    res = gigpo_batch([1.0, 0.0, 1.0], [1, 1, 1], ["g7", "g7", "g2"], ["s", "s", "s"], gamma=1.0)
    assert res.group.tolist() == [0, 0, 1]
    np.testing.assert_allclose(res.step_flat, [0.5, -0.5, 0.0])
    with pytest.raises(ValueError, match="contiguous"):
        gigpo_batch([1.0, 0.0, 1.0], [1, 1, 1], [0, 1, 0], ["s", "s", "s"])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"step_rewards": [[1.0]], "state_keys": [["a"], ["b"]]}, "episodes"),
        ({"step_rewards": [[1.0, 0.0]], "state_keys": [["a"]]}, "episode 0"),
        ({"step_rewards": [[float("nan")]], "state_keys": [["a"]]}, "NaN"),
        ({"step_rewards": [[1.0]], "state_keys": [["a"]], "mode": "std"}, "mode"),
        ({"step_rewards": [[1.0]], "state_keys": [["a"]], "gamma": 1.5}, "gamma"),
        ({"step_rewards": [[1.0]], "state_keys": [["a"]], "episode_rewards": [1.0, 2.0]}, "episode_rewards"),
    ],
)
def test_bad_input_names_the_problem(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gigpo(**kwargs)


def test_an_episode_without_turns_takes_part_in_its_groups_episode_advantage_only():
    """A user agent's rollout that failed before sampling: its 0 return lowers the group mean,
    and it has no turn to advantage."""
    res = gigpo_batch([1.0, 1.0], [1, 0, 1], [0, 0, 0], ["s", "s"], episode_rewards=[1.0, 0.0, 1.0])
    np.testing.assert_allclose(res.episode, [1 / 3, -2 / 3, 1 / 3])
    assert res.combined_flat.shape == (2,)
    np.testing.assert_allclose(res.episode_turns_flat, [1 / 3, 1 / 3])
