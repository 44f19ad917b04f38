"""Single-turn advantages (GRPO, Dr. GRPO, RLOO) and TRL's group metrics, hand-computed."""

import math

import numpy as np
import pytest

from rlab.engine.train.advantages import grpo, rloo
from rlab.store.stepstats import reward_stats


def test_grpo_hand_computed_with_unbiased_std_and_eps():
    # r = [1, 0, 0, 1]: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = sqrt(1/3)
    adv = grpo([1.0, 0.0, 0.0, 1.0])
    expected = 0.5 / (math.sqrt(1 / 3) + 1e-4)
    np.testing.assert_allclose(adv, [expected, -expected, -expected, expected], rtol=1e-12)


def test_grpo_eps_is_configurable():
    # r = [2, 0]: mean 1, unbiased std sqrt(2)
    np.testing.assert_allclose(grpo([2.0, 0.0], eps=0.0), [1 / math.sqrt(2), -1 / math.sqrt(2)])


def test_dr_grpo_centres_without_scaling():
    np.testing.assert_allclose(grpo([3.0, 1.0, 2.0], scale="none"), [1.0, -1.0, 0.0])


def test_grpo_all_equal_and_single_give_exact_zero():
    assert np.all(grpo([0.1, 0.1, 0.1]) == 0.0)
    assert np.all(grpo([0.1, 0.1, 0.1], scale="none") == 0.0)
    assert np.all(grpo([5.0]) == 0.0)


def test_grpo_normalises_each_row_of_a_2d_batch():
    adv = grpo(np.array([[1.0, 0.0], [4.0, 4.0]]), eps=0.0)
    np.testing.assert_allclose(adv, [[1 / math.sqrt(2), -1 / math.sqrt(2)], [0.0, 0.0]])


def test_grpo_rejects_bad_input():
    with pytest.raises(ValueError, match="scale"):
        grpo([1.0, 0.0], scale="max")
    with pytest.raises(ValueError, match="NaN"):
        grpo([1.0, float("nan")])
    with pytest.raises(ValueError, match="scalar"):
        grpo(1.0)


def test_rloo_leave_one_out_baseline():
    # r = [1, 0, 0]: baselines (0+0)/2, (1+0)/2, (1+0)/2
    np.testing.assert_allclose(rloo([1.0, 0.0, 0.0]), [1.0, -0.5, -0.5])
    np.testing.assert_allclose(rloo([2.0, 4.0, 6.0, 0.0]), [2 - 10 / 3, 4 - 8 / 3, 6 - 2.0, 0 - 4.0])
    assert np.all(rloo([3.0]) == 0.0)


def test_reward_stats_follow_trl_definitions():
    stats = reward_stats([[1.0, 0.0], [1.0, 1.0], [0.0, 2.0]])
    assert stats["reward"] == pytest.approx(5 / 6)
    # within-group unbiased stds: sqrt(0.5), 0, sqrt(2)
    assert stats["reward_std"] == pytest.approx((math.sqrt(0.5) + 0 + math.sqrt(2)) / 3)
    assert stats["frac_reward_zero_std"] == pytest.approx(1 / 3)


def test_reward_stats_group_of_one_counts_as_zero_std():
    assert reward_stats([[0.7]]) == {"reward": pytest.approx(0.7), "reward_std": 0.0, "frac_reward_zero_std": 1.0}


def test_reward_stats_rejects_empty_input():
    with pytest.raises(ValueError, match="at least one group"):
        reward_stats([])
    with pytest.raises(ValueError, match="empty group"):
        reward_stats([[1.0], []])
