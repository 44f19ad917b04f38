"""What a reward file may import from the lab: small helpers, nothing heavy.

A reward file runs in the user-code child process (``engine.rewards.child``)
and is copied, edited and re-checked during a run, so what it imports must
load in milliseconds and must not pull in the engine, the store or torch.
This module imports only the standard library; ``tests/test_layering.py``
checks that it stays so, and that scenarios reach the engine only through
this module, ``engine.types`` and ``engine.paths``.

    from rlab.engine.rewards.helpers import env_reward   # the environment's own reward

- :func:`env_reward`: the environment's own reward as one rubric component;
- :data:`ENV_REWARDS_KEY`: the example key that carries it;
- :func:`tool_errors`: a tool task's failed calls, charged on the turns that made them;
- :data:`TOOL_CALLS_KEY`: the example key that carries a tool episode's calls.
"""

from __future__ import annotations

from typing import Any

#: Multi-step episodes: the environment's own per-turn rewards (list of floats,
#: one per turn, invalid-action penalty included). Lab-style functions read
#: ``example[ENV_REWARDS_KEY]``; TRL-style ones get ``env_rewards``, verifiers-style
#: ones ``state["env_rewards"]``.
ENV_REWARDS_KEY = "_env_rewards"

#: Tool tasks: the episode's tool calls, one list per assistant turn, each call a dict
#: ``{"name", "arguments", "result", "error", "seconds"}`` (``error`` None when it ran and
#: returned). Lab-style functions read ``example[TOOL_CALLS_KEY]``; TRL-style ones get
#: ``tool_calls``, verifiers-style ones ``state["tool_calls"]``. The conversation itself
#: (``completion``) holds the same calls as OpenAI messages (``tool_calls``, role ``tool``).
TOOL_CALLS_KEY = "_tool_calls"


def env_reward(example: dict[str, Any], completion: list[dict[str, Any]]) -> dict[str, Any]:
    """The environment's own reward: the sum of its per-turn rewards, also given per turn.

    Multi-step reward files (number_guess, game2048, maze, user environments)
    import it and weigh it in WEIGHTS like any other reward function, so the
    environment's reward trains a run only as far as the rubric says. The
    engine hands the environment's rewards to the rubric as
    ``example["_env_rewards"]`` (one float per assistant turn); returning
    them as ``step_rewards`` lets GiGPO's step-level advantage see when
    they were earned. Re-scoring stored groups reads them back from the run
    file (``engine.rewards.edit.stored``); with none stored (no environment)
    the reward is 0.0 with ``details["turns"]`` None: no verdict.
    """
    if ENV_REWARDS_KEY not in example:
        return {"reward": 0.0, "details": {"turns": None}}
    steps = [float(r) for r in example[ENV_REWARDS_KEY]]
    return {"reward": sum(steps), "step_rewards": steps, "details": {"turns": len(steps)}}


def tool_errors(example: dict[str, Any], completion: list[dict[str, Any]]) -> dict[str, Any]:
    """Minus the episode's failed tool calls, each charged to the turn that made it.

    A call fails when it was malformed, named no tool, had bad arguments,
    raised, timed out or returned too much (its ``error`` is set). Weigh it
    (e.g. ``WEIGHTS = {"correct": 1.0, "tool_errors": 0.1}``) to make a failed
    call cost; its ``step_rewards`` let GiGPO see which turn it was. Without
    tool calls in the example (not a tool task) the reward is 0.0 with
    ``details["calls"]`` None: no verdict.
    """
    turns = example.get(TOOL_CALLS_KEY)
    if turns is None:
        return {"reward": 0.0, "details": {"calls": None}}
    failed = [float(-sum(call.get("error") is not None for call in calls)) for calls in turns]
    return {"reward": sum(failed), "step_rewards": failed,
            "details": {"calls": sum(len(calls) for calls in turns), "errors": int(-sum(failed))}}
