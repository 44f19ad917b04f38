"""``env_reward``: the environment's own reward as one rubric component.

Multi-step reward files (number_guess, game2048, maze, user environments)
import it and weigh it in WEIGHTS like any other reward function, so the
environment's reward trains a run only as far as the rubric says.
"""

from __future__ import annotations

from typing import Any

from rlab.engine.rewards.signatures import ENV_REWARDS_KEY


def env_reward(example: dict[str, Any], completion: list[dict[str, Any]]) -> dict[str, Any]:
    """The environment's own reward: the sum of its per-turn rewards, also given per turn.

    The engine hands the environment's rewards to the rubric as
    ``example["_env_rewards"]`` (one float per assistant turn); returning
    them as ``step_rewards`` lets GiGPO's step-level advantage see when
    they were earned. Outside a run (no environment) the reward is 0.0 with
    ``details["turns"]`` None: no verdict.
    """
    if ENV_REWARDS_KEY not in example:
        return {"reward": 0.0, "details": {"turns": None}}
    steps = [float(r) for r in example[ENV_REWARDS_KEY]]
    return {"reward": sum(steps), "step_rewards": steps, "details": {"turns": len(steps)}}
