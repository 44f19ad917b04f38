"""TRL-named step metrics computed from a step's stored groups.

One definition shared by the engine (its own runs) and the importers (other
tools' artifacts that carry no logged metrics), so a metric means the same
thing whichever way a run got into the file. Names and formulas follow TRL's
``GRPOTrainer._generate_and_score_completions``:

- ``reward``: mean reward over every trajectory of the step;
- ``reward_std``: mean over groups of the within-group std (ddof 1, as
  ``torch.std``; a group of one counts as 0);
- ``frac_reward_zero_std``: fraction of groups whose std is 0 (``isclose``);
- ``rewards/{name}/mean`` and ``rewards/{name}/std``: per reward function
  (``TrajectoryRecord.components``), mean and std (ddof 1) over the step's
  trajectories, NaN-skipping as TRL's ``nanmean``/``nanstd``;
- ``success_rate`` (the lab's, no TRL name): share of trajectories that
  solved their task by the declared success function (``engine.rewards.success``);
- ``completions/mean_length``, ``completions/min_length``,
  ``completions/max_length``: completion length in tokens;
- ``completions/clipped_ratio``: fraction of completions cut at the token
  limit (``truncated``), and ``completions/mean_terminated_length``: mean
  length (tokens) of the others (0 when every completion was clipped);
- ``num_tokens``: prompt + completion tokens of the step.

A step of a tool task (its trajectories carry ``tool_calls``) also gets
(:func:`tool_stats`; TRL logs the first two as ``tools/call_frequency`` and
``tools/failure_frequency``):

- ``tools/calls_mean``: tool calls per trajectory;
- ``tools/error_share``: failed calls / calls (absent when no call was made);
- ``tools/use_rate``: share of trajectories that called a tool at all;
- ``tools/loop_share``: share of trajectories cut at the turn limit while
  still calling (a loop of calls, never an answer);
- ``tools/{name}/calls``: calls to that tool per trajectory (names the policy
  wrote: the :data:`MAX_TOOL_NAMES` most called that are identifiers, so
  hallucinated names cannot flood the metrics);
- ``turns/mean``: assistant turns per trajectory.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from rlab.store.records import GroupRecord

#: Tool names that get a ``tools/{name}/calls`` metric: identifiers, and at most this many a step.
TOOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
MAX_TOOL_NAMES = 16

#: The ``scale`` of :func:`grpo_advantages`: GRPO's std, or none (Dr. GRPO).
SCALES = ("std", "none")


def reward_stats(rewards_by_group: Sequence[Sequence[float]]) -> dict[str, float]:
    """``reward``, ``reward_std`` and ``frac_reward_zero_std`` of a step.

    Args:
        rewards_by_group: one sequence of float rewards per group (any sizes).

    Raises:
        ValueError: no groups, an empty group, or a non-finite reward.
    """
    if len(rewards_by_group) == 0:
        raise ValueError("reward statistics need at least one group of rewards")
    groups = [np.asarray(g, dtype=np.float64) for g in rewards_by_group]
    if any(g.ndim != 1 or g.size == 0 for g in groups):
        raise ValueError("reward statistics got an empty group; every group needs >= 1 reward")
    if not all(np.all(np.isfinite(g)) for g in groups):
        raise ValueError("rewards contain NaN or inf; fix the reward function that produced them")
    stds = np.array([g.std(ddof=1) if g.size > 1 else 0.0 for g in groups])
    return {
        "reward": float(np.concatenate(groups).mean()),
        "reward_std": float(stds.mean()),
        "frac_reward_zero_std": float(np.isclose(stds, 0.0).mean()),
    }


def as_rewards(rewards: ArrayLike) -> np.ndarray:
    """``rewards`` as a float64 array of at least one dimension.

    Raises:
        ValueError: a scalar, or a non-finite reward.
    """
    arr = np.asarray(rewards, dtype=np.float64)
    if arr.ndim == 0:
        raise ValueError("rewards must be a sequence of floats (one group), got a scalar")
    if not np.all(np.isfinite(arr)):
        raise ValueError("rewards contain NaN or inf; fix the reward function that produced them")
    return arr


def _unbiased_std(arr: np.ndarray) -> np.ndarray:
    """Std with ddof 1 along the last axis; 0 for a group of one (no spread)."""
    if arr.shape[-1] < 2:
        return np.zeros(arr.shape[:-1])
    return arr.std(axis=-1, ddof=1)


def grpo_advantages(rewards: ArrayLike, *, eps: float = 1e-4, scale: str = "std") -> np.ndarray:
    """GRPO group-relative advantages (Shao et al. 2024, arXiv 2402.03300, sec. 4.1.2).

    The engine trains with them (``engine.train.advantages.grpo``) and the
    importers fill them in for runs whose tool stored none (evaluations).

    A_i = (r_i - mean_j r_j) / (std_j r_j + eps), std unbiased (ddof 1).

    Args:
        rewards: float array of shape (G,) for one group, or (..., G) for
            several groups of equal size (normalised along the last axis).
        eps: added to the std (default 1e-4, TRL's value).
        scale: ``"std"`` (GRPO) or ``"none"`` (Dr. GRPO: A_i = r_i - mean r,
            Liu et al. 2025, arXiv 2503.20783).

    Returns:
        float64 array, same shape as ``rewards``. A group of one gives 0;
        a group whose rewards are all equal gives exactly 0.

    Raises:
        ValueError: unknown ``scale``, a scalar input, or non-finite rewards.
    """
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    arr = as_rewards(rewards)
    # centre on the first reward before averaging so all-equal groups give exact zeros
    shifted = arr - arr[..., :1]
    centred = shifted - shifted.mean(axis=-1, keepdims=True)
    if scale == "none":
        return centred
    return safe_divide(centred, _unbiased_std(arr)[..., None] + eps)


def safe_divide(centred: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """centred / scale, 0 where scale is 0 (then centred is 0 too: no spread, eps 0)."""
    return np.divide(centred, scale, out=np.zeros(np.broadcast_shapes(centred.shape, scale.shape)), where=scale > 0)


def _nan_stats(values: list[float]) -> tuple[float | None, float | None]:
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        return None, None
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else 0.0


def component_stats(groups: Sequence[GroupRecord]) -> dict[str, float]:
    """``rewards/{name}/mean`` and ``rewards/{name}/std`` for every reward
    function named in the trajectories' ``components`` (missing or non-finite
    values skipped, as TRL's nanmean/nanstd)."""
    by_name: dict[str, list[float]] = {}
    for group in groups:
        for trajectory in group.trajectories:
            if trajectory.reward is None:  # scoring failed: its components are no verdicts either
                continue
            for name, value in trajectory.components.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    by_name.setdefault(name, []).append(float(value))
    out: dict[str, float] = {}
    for name, values in by_name.items():
        mean, std = _nan_stats(values)
        if mean is not None and std is not None:
            out[f"rewards/{name}/mean"] = mean
            out[f"rewards/{name}/std"] = std
    return out


def length_stats(groups: Sequence[GroupRecord]) -> dict[str, float]:
    """Completion-length metrics (tokens) and ``num_tokens`` of a step; ``{}``
    when the step has no trajectories, or none has a token count (a run
    imported from a tool that stored none: plotted as n/a, not as 0)."""
    trajectories = [t for g in groups for t in g.trajectories]
    if not any(t.completion_tokens or t.prompt_tokens for t in trajectories):
        return {}
    lengths = np.array([t.completion_tokens for t in trajectories], dtype=np.float64)
    clipped = np.array([t.truncated for t in trajectories], dtype=bool)
    terminated = lengths[~clipped]
    return {
        "completions/mean_length": float(lengths.mean()),
        "completions/min_length": float(lengths.min()),
        "completions/max_length": float(lengths.max()),
        "completions/clipped_ratio": float(clipped.mean()),
        "completions/mean_terminated_length": float(terminated.mean()) if terminated.size else 0.0,
        "num_tokens": float(sum(t.prompt_tokens + t.completion_tokens for t in trajectories)),
    }


def step_stats(groups: Sequence[GroupRecord]) -> dict[str, float]:
    """Every metric of the module docstring for one step's groups, plus
    ``reward_min``/``reward_max``, over the trajectories that were scored
    (an errored one has no reward); ``{}`` for a step without scored trajectories.

    Raises:
        ValueError: a non-finite reward.
    """
    rewards = [scored for g in groups if (scored := [t.reward for t in g.trajectories if t.reward is not None])]
    if not rewards:
        return {}
    flat = [r for group in rewards for r in group]
    return {
        **reward_stats(rewards),
        "reward_min": float(min(flat)),
        "reward_max": float(max(flat)),
        **success_stats(groups),
        **component_stats(groups),
        **length_stats(groups),
        **tool_stats(groups),
    }


def success_stats(groups: Sequence[GroupRecord]) -> dict[str, float]:
    """``success_rate``: the share of the step's trajectories that solved their task by
    the run's declared success function, over those with a verdict; ``{}`` when none has one."""
    verdicts = [t.success for g in groups for t in g.trajectories if t.success is not None]
    return {"success_rate": float(np.mean(verdicts))} if verdicts else {}


def tool_stats(groups: Sequence[GroupRecord]) -> dict[str, float]:
    """The ``tools/*`` and ``turns/mean`` metrics of the module doc over a step's tool
    trajectories (those with ``tool_calls`` not None); ``{}`` when there are none."""
    trajectories = [t for g in groups for t in g.trajectories if t.tool_calls is not None]
    if not trajectories:
        return {}
    calls = [c for t in trajectories for c in t.tool_calls or []]
    turns = [sum(m.get("role") == "assistant" for m in t.messages) for t in trajectories]
    looped = [t.truncated and any(c.turn == n - 1 for c in t.tool_calls or []) for t, n in zip(trajectories, turns)]
    out = {
        "tools/calls_mean": len(calls) / len(trajectories),
        "tools/use_rate": float(np.mean([bool(t.tool_calls) for t in trajectories])),
        "tools/loop_share": float(np.mean(looped)),
        "turns/mean": float(np.mean(turns)),
    }
    if calls:
        out["tools/error_share"] = sum(c.error is not None for c in calls) / len(calls)
    named = Counter(c.name for c in calls if TOOL_NAME.fullmatch(c.name))
    for name, count in named.most_common(MAX_TOOL_NAMES):
        out[f"tools/{name}/calls"] = count / len(trajectories)
    return out
