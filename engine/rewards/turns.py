"""Per-turn rewards of a multi-step episode, from the rubric's verdict.

The rubric (and the judge, when on) decides an episode's reward R; the
environment's own reward reaches it only as a component (``env_reward`` in the
built-in reward files, reading ``example[ENV_REWARDS_KEY]``). GiGPO's
step-level advantage also needs a reward per turn (Feng et al. 2025, arXiv
2505.10978, section 4.2: R_t = sum_{k>=t} gamma^(k-t) r_k). They come from the
reward functions that return ``step_rewards`` (weighted, summed by the
rubric); whatever part of R those do not account for (the functions that
score the episode as a whole, the judge's share) is paid on the last turn,
as a sparse episode reward is. So sum_t r_t == R for every episode.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from rlab.engine.rewards.score_result import ScoreResult


class TurnRewardError(ValueError):
    """A rubric's ``step_rewards`` do not fit the episode's turns."""


def check_step_rewards(score: ScoreResult, n_turns: int) -> ScoreResult:
    """``score``, or a copy marked as errored when its step rewards do not fit ``n_turns`` turns.

    An errored score has reward 0 and the problem in ``error`` and
    ``details["error"]``, as any other reward-function error.
    """
    try:
        turn_rewards(score, score.reward, n_turns)
    except TurnRewardError as err:
        message = f"step_rewards: {err}"
        details = {**score.details, "error": message, "error_kind": "bad_reward", "error_line": None}
        return dataclasses.replace(score, reward=0.0, step_rewards=None, details=details, error=message)
    return score


def turn_rewards(score: ScoreResult, reward: float, n_turns: int) -> np.ndarray:
    """(n_turns,) float64 per-turn rewards r_t summing to ``reward``.

    Args:
        score: the rubric's verdict on the episode (its ``step_rewards``: a
            list with one value per turn, a dict ``{turn_index: reward}``,
            or None).
        reward: the episode's reward R (the rubric's, judge-mixed when a
            judge is on).
        n_turns: T, the episode's assistant turns (0 only for a user agent's
            rollout that failed before it sampled anything: nothing to reward).

    Returns:
        r with r_t = step_rewards[t] and r_{T-1} += R - sum(step_rewards).

    Raises:
        TurnRewardError: a list of the wrong length, or a turn index >= T.
    """
    r = np.zeros(n_turns, dtype=np.float64)
    steps = score.step_rewards
    if isinstance(steps, list):
        if len(steps) != n_turns:
            raise TurnRewardError(f"{len(steps)} values for an episode of {n_turns} turns; "
                                  "return one per turn, or a dict {turn_index: reward}")
        r[:] = steps
    elif isinstance(steps, dict):
        late = sorted(t for t in steps if t >= n_turns)
        if late:
            raise TurnRewardError(f"turn index {late[0]} in an episode of {n_turns} turns (0..{n_turns - 1})")
        for t, value in steps.items():
            r[t] = value
    if n_turns:
        r[-1] += reward - r.sum()
    return r
