"""``env_reward``: the environment's own reward as one rubric component.

Multi-step reward files (number_guess, game2048, maze, user environments)
import it and weigh it in WEIGHTS like any other reward function, so the
environment's reward trains a run only as far as the rubric says.
"""

from __future__ import annotations

from typing import Any

from rlab.engine.rewards.signatures import ENV_REWARDS_KEY
from rlab.store.reader import StoreReader
from rlab.store.rows import GroupRow


def env_reward(example: dict[str, Any], completion: list[dict[str, Any]]) -> dict[str, Any]:
    """The environment's own reward: the sum of its per-turn rewards, also given per turn.

    The engine hands the environment's rewards to the rubric as
    ``example["_env_rewards"]`` (one float per assistant turn); returning
    them as ``step_rewards`` lets GiGPO's step-level advantage see when
    they were earned. Re-scoring stored groups reads them back from the run
    file (:func:`stored_trajectory`); with none stored (no environment) the
    reward is 0.0 with ``details["turns"]`` None: no verdict.
    """
    if ENV_REWARDS_KEY not in example:
        return {"reward": 0.0, "details": {"turns": None}}
    steps = [float(r) for r in example[ENV_REWARDS_KEY]]
    return {"reward": sum(steps), "step_rewards": steps, "details": {"turns": len(steps)}}


def stored_group(reader: StoreReader, group: GroupRow, example: dict[str, Any]) -> dict[str, Any]:
    """A stored group as a re-scoring takes it (``engine.rewards.check``):
    ``{"trajectories": [{"example", "completion", "reward"}]}``, with what the
    run's rubric saw (``engine.rewards.edit.check_samples``): a multi-step
    trajectory's completion is its whole transcript, and its example carries
    its turns' stored environment rewards, so ``env_reward`` scores what it
    scored in the run. Runs stored before schema v9 (or imported) have no
    such rewards: there ``env_reward`` gives 0.0 with no verdict.
    """
    env = reader.env_rewards(group["id"])  # only multi-step trajectories have turns
    return {"trajectories": [
        {"example": _with_env_rewards(example, env[t["id"]]), "completion": t["messages"], "reward": t["reward"]}
        if t["id"] in env else {"example": example, "completion": t["completion"], "reward": t["reward"]}
        for t in group["trajectories"]]}


def _with_env_rewards(example: dict[str, Any], rewards: list[float | None]) -> dict[str, Any]:
    if any(r is None for r in rewards):
        return example
    return {**example, ENV_REWARDS_KEY: rewards}
