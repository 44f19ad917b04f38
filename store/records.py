"""What the engine hands the store, and the store's fixed vocabularies."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rlab.store.errors import UsageError

DEFAULT_SUCCESS_THRESHOLD = 1.0
"""A trajectory counts as solved when its success value reaches this, unless
its task declares another threshold (``engine.rewards.success``); also the rule
for trajectories stored without a success verdict (reward >= 1)."""

RUN_STATUSES = ("running", "paused", "finished", "failed", "crashed", "stopped")
"""Values of ``runs.status``; the last four are terminal (``ended_at`` set)."""

TERMINAL_STATUSES = ("finished", "failed", "crashed", "stopped")

RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
"""What a run name may be: it names the run's folder under rlab_runs/ (no path, nothing hidden)."""


def check_run_name(name: str) -> str:
    """``name``, if it may name a run (:data:`RUN_NAME`), for every path that names one
    (``rlab run``, ``rlab import``).

    Raises:
        UsageError: it may not; the message gives the rule.
    """
    if not RUN_NAME.fullmatch(name):
        raise UsageError("a run name names its folder under rlab_runs/: use 1-100 letters, digits, '.', "
                         "'_' or '-', starting with a letter or digit")
    return name


RUN_KINDS = ("train", "eval", "select")
"""Values of ``runs.kind``: loop C (training), loop A (evaluation), loop B (selection)."""

EVENT_KINDS = (
    "pause", "resume", "reward_edit", "alert", "error", "eval", "judge_failed", "checkpoint",
    "server_dropped", "warning", "stop", "fork", "settings",
)
"""Values of ``events.kind``."""

COMMAND_KINDS = ("pause", "resume", "step", "stop", "set_rewards", "set_settings")
"""Values of ``commands.kind`` (the TUI -> engine control channel)."""

COMMAND_STATUSES = ("pending", "applied", "rejected")
"""Values of ``commands.status``: written ``pending``, resolved by the engine."""


@dataclass
class TurnRecord:
    """One assistant turn of a multi-step episode, with its GiGPO quantities.

    Formulas: GiGPO (Feng et al. 2025, arXiv 2505.10978), see docs/architecture.md.

    Attributes:
        t: turn index in the episode, from 0.
        state_key: environment state before the turn (the anchor state); any
            hashable value, stored as ``str(state_key)``.
        reward: r_t, the turn's trained reward (the rubric's per-turn share,
            ``engine.rewards.turns``).
        ret: R_t, the discounted return from this turn, sum_k gamma^(k-t) r_k.
        adv_episode: A^E of the episode this turn belongs to.
        adv_step: A^S of this turn within its anchor group (0 if size 1).
        advantage: A = A^E + omega * A^S, the scalar spread over its tokens.
        anchor_id: identifier of the anchor group (unique within the group).
        anchor_size: number of (episode, turn) pairs in that anchor group.
        env_reward: the environment's own reward of this turn (None: not known,
            e.g. an imported run).
    """

    t: int
    state_key: Any
    reward: float
    ret: float
    adv_episode: float
    adv_step: float
    advantage: float
    anchor_id: Any
    anchor_size: int
    env_reward: float | None = None


TOOL_ERROR_PREFIX = "error: "
"""How a ``tool`` message tells the policy its call failed (``engine.tools.calls``); an
importer reads a result that starts with it as the call's error."""


@dataclass
class ToolCallRecord:
    """One tool call of a trajectory, as stored (``tool_calls`` table).

    Attributes:
        turn: the assistant turn that made it, from 0.
        index: its place among that turn's calls, from 0.
        call_id: the id its ``tool`` message answers (``tool_call_id``).
        name: the tool named ("" for a call that did not parse).
        arguments: the arguments object as written (JSON-serialisable).
        result: what the tool returned, as text ("" when it failed).
        error: None, or what went wrong as the policy was told it.
        seconds: wall seconds the call ran.
    """

    turn: int
    index: int
    call_id: str
    name: str
    arguments: dict
    result: str = ""
    error: str | None = None
    seconds: float = 0.0


@dataclass
class TrajectoryRecord:
    """One rollout of a group, scored, with its advantage.

    Attributes:
        index: position in its group, 0..G-1.
        messages: the whole conversation, OpenAI-style dicts
            (``{"role": ..., "content": ...}``); must be JSON-serialisable.
        completion: the policy's text (single-turn: the one completion).
        reward: weighted rubric reward; None when scoring it failed
            (``details["error"]`` says why): never a 0 that looks like one.
        components: rubric function name -> its unweighted reward.
        details: the scorer's details dict; its ``parse_status`` (top level,
            or the first rubric function's) is also stored in its own column.
        advantage: the trajectory's advantage (GRPO; for GiGPO the episode
            advantage A^E, per-turn values are in ``turns``).
        prompt_tokens, completion_tokens: lengths in tokens.
        reward_version: version of the rubric that scored it.
        judge_score, judge_rank, judge_explanation: RULER judge output, if any.
        truncated: generation hit ``max_new_tokens``.
        success: the task's success function says it solved the task
            (``engine.rewards.success``); None: no verdict (an errored score, an import).
        turns: per-turn records of a multi-step episode (empty: single turn).
        logprobs: per sampled token, its logprob (nats) under the sampling
            policy, or None (not stored); token_ends: per token, the
            character offset in ``completion`` where its text ends (same
            length). Stored as float16 / uint32 (store/tokens.py).
        policy_logprobs: per sampled token, its logprob (nats) under the
            trained policy at the update (the trainer's own forward pass:
            the sampler's mismatch is ``policy_logprobs - logprobs``), or None
            (not measured: no update signal, a multi-step episode, an import).
        tool_calls: a tool task's calls, every turn's in order (``[]``: it
            called none); None when no tools were offered.
    """

    index: int
    messages: list[dict]
    completion: str
    reward: float | None
    components: dict[str, float]
    details: dict
    advantage: float
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reward_version: int | None = None
    judge_score: float | None = None
    judge_rank: int | None = None
    judge_explanation: str | None = None
    truncated: bool = False
    success: bool | None = None
    turns: list[TurnRecord] = field(default_factory=list)
    logprobs: list[float] | None = None
    token_ends: list[int] = field(default_factory=list)
    policy_logprobs: list[float] | None = None
    tool_calls: list[ToolCallRecord] | None = None


@dataclass
class GroupRecord:
    """G trajectories from one prompt / initial state.

    Attributes:
        index: position of the group within its step.
        example_id: the dataset example's ``id``.
        prompt: the prompt text (single-turn) or first observation.
        trajectories: the group's rollouts.
        initial_state_key: multi-step: the shared initial state (``str()``-ed).
        judge_status: ``None`` (no judge), ``"ok"`` or ``"failed"``.
        judge_error: the judge's error message when it failed.
        example: the whole dataset example (JSON-serialisable), for re-scoring.
    """

    index: int
    example_id: Any
    prompt: str
    trajectories: list[TrajectoryRecord]
    initial_state_key: Any = None
    judge_status: str | None = None
    judge_error: str | None = None
    example: dict | None = None


STEP_METRIC_COLUMNS = {
    "reward": "reward",
    "reward_std": "reward_std",
    "reward_min": "reward_min",
    "reward_max": "reward_max",
    "frac_reward_zero_std": "frac_reward_zero_std",
    "kl": "kl",
    "entropy": "entropy",
    "clip_ratio": "clip_ratio",
    "completions/mean_length": "completions_mean_length",
    "loss": "loss",
    "grad_norm": "grad_norm",
    "step_seconds": "step_seconds",
    "eval/pass_at_1": "eval_pass_at_1",
    "judge/tau": "judge_tau",
    "success_rate": "success_rate",
    "eval/reward": "eval_reward",
}
"""Metric name (TRL naming where TRL has one) -> its column in ``steps``.

Units: ``completions/mean_length`` in tokens, ``step_seconds`` in seconds,
``judge/tau`` is Kendall's tau between judge and rubric rankings,
``success_rate`` the share of the step's trajectories that solved their task
(its declared success function) and ``eval/reward`` the held-out mean
reward beside ``eval/pass_at_1``; the rest are unitless. Other metric keys are kept only in the ``metrics`` JSON.
"""
