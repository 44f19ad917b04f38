"""Advantages: GRPO family for single-turn groups, GiGPO for multi-step groups.

Single-turn (one scalar reward per trajectory, G trajectories per group):

- :func:`grpo` (``store.stepstats.grpo_advantages``): A_i = (r_i - mean r) /
  (std r + eps), std unbiased (ddof 1), eps 1e-4 by default (as TRL's
  GRPOTrainer); ``scale="none"`` is Dr. GRPO's mean-only centring (Liu et
  al. 2025, arXiv 2503.20783).
- :func:`rloo`: the leave-one-out baseline (Ahmadian et al. 2024,
  arXiv 2402.14740).
TRL's logged reward metrics (``reward``, ``reward_std``,
``frac_reward_zero_std``) are ``store.stepstats.reward_stats``.

Multi-step (N episodes of T_i turns from one initial state):

- GiGPO (``engine.train.gigpo``; Feng et al. 2025, arXiv 2505.10978):
  episode- and step-level relative advantages, one scalar per turn. The
  GRPO baseline of multi-step runs is :func:`grpo` of the episode rewards
  on every turn (:func:`rollout_advantages`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rlab.engine.train.gigpo import GiGPOResult, batch_advantages
from rlab.engine.types import Rollouts
from rlab.store.stepstats import as_rewards, grpo_advantages

#: GRPO's advantages (Shao et al. 2024): one definition, in ``store.stepstats``,
#: shared with the importers (the store may not import the engine).
grpo = grpo_advantages

def rloo(rewards) -> np.ndarray:
    """REINFORCE leave-one-out advantages (Ahmadian et al. 2024, arXiv 2402.14740, the RLOO estimator).

    A_i = r_i - (1 / (G - 1)) * sum_{j != i} r_j = G / (G - 1) * (r_i - mean r).

    Args:
        rewards: float array of shape (G,) or (..., G), as in :func:`grpo`.

    Returns:
        float64 array, same shape; a group of one gives 0.

    Raises:
        ValueError: a scalar input or non-finite rewards.
    """
    arr = as_rewards(rewards)
    size = arr.shape[-1]
    if size < 2:
        return np.zeros_like(arr)
    shifted = arr - arr[..., :1]
    return size / (size - 1) * (shifted - shifted.mean(axis=-1, keepdims=True))


def group_relative(rewards: np.ndarray, method: str) -> np.ndarray:
    """Advantages (P, G) for a (P, G) reward array, by ``method``.

    grpo: (r - mean) / (unbiased std + 1e-4) (Shao et al. 2024, eq. 3 outcome
    supervision); dr_grpo: r - mean (Liu et al. 2025, arXiv 2503.20783);
    rloo: leave-one-out baseline (Ahmadian et al. 2024, arXiv 2402.14740).
    """
    if method == "rloo":
        return rloo(rewards)
    return grpo(rewards, scale="none" if method == "dr_grpo" else "std")


# --------------------------------------------------------------------------
# One step's rollouts -> per-turn advantages


@dataclass
class RolloutAdvantages:
    """The advantages of one step's rollouts, one scalar per turn.

    rewards: (P, G) float64, the rewards the advantages were computed from
        (the rubric's, judge-mixed when a judge is on, for every task kind).
    per_turn: per trajectory (aligned with ``Rollouts.trajectories()``), a
        (T_i,) float64 array: the advantage spread over that turn's tokens.
    per_trajectory: (P * G,) float64, the trajectory-level advantage stored
        with each trajectory (A^E for multi-step).
    gigpo: the GiGPO breakdown (returns, A^E, A^S, anchors) for multi-step
        rollouts, else None.
    """

    rewards: np.ndarray
    per_turn: list[np.ndarray]
    per_trajectory: np.ndarray
    gigpo: GiGPOResult | None = None


def rollout_advantages(rollouts: Rollouts, rewards: np.ndarray, skip: np.ndarray, *, method: str,
                       turn_rewards: Sequence[np.ndarray] | None = None, gamma: float = 0.95,
                       omega: float = 1.0, mode: str = "mean_norm") -> RolloutAdvantages:
    """Advantages for one step's rollouts by ``method``, from the rubric's rewards.

    Single-turn: :func:`group_relative` on the (P, G) ``rewards``. Multi-step:
    GiGPO (``method == "gigpo"``: A^E + omega * A^S per turn, Feng et al.
    2025, arXiv 2505.10978, eq. 7, normalised by ``mode``), with the episode
    return R_i = ``rewards`` (the rubric's episode reward) and step returns
    from ``turn_rewards`` (per trajectory, (T_i,) float64 summing to its
    reward; ``engine.rewards.turns``); any other ``method`` puts its
    single-turn advantage of the episode reward (:func:`group_relative`:
    GRPO divides by the group's std whatever ``mode`` says) on every turn of
    the episode, as the paper's GRPO baseline does. Groups flagged in
    ``skip`` ((P,) bool: a failed judge call, a reward error) get advantage
    0 on every turn, so the update skips them instead of guessing.

    Raises:
        ValueError: multi-step rollouts without ``turn_rewards``.
    """
    if rollouts.multi_step:
        if turn_rewards is None:
            raise ValueError("rollout_advantages: multi-step rollouts need turn_rewards (Scored.turn_rewards)")
        result = batch_advantages(rollouts.groups, turn_rewards, gamma=gamma, omega=omega, mode=mode,
                                  episode_rewards=rewards.reshape(-1))
        if method == "gigpo":
            per_turn, per_episode = list(result.combined), result.episode
        else:
            per_episode = group_relative(rewards, method).reshape(-1)
            per_turn = [np.full(n, a) for n, a in zip(np.diff(result.offsets), per_episode)]
        skipped = np.repeat(skip, rollouts.group_size)
        per_turn = [np.zeros_like(a) if s else a for a, s in zip(per_turn, skipped)]
        return RolloutAdvantages(rewards, per_turn, np.where(skipped, 0.0, per_episode), result)
    advantages = group_relative(rewards, method)
    advantages[skip] = 0.0
    flat = advantages.reshape(-1)
    return RolloutAdvantages(rewards, [np.array([a]) for a in flat], flat)
