"""Completions for a split, scored by the rubric: what loops A and B measure.

Loop A (eval) draws one completion per example (greedy by default); loop B
(select) draws N per example. Nothing is trained: the policy is the same
before and after.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rlab.engine.run.config import RunConfig
from rlab.engine.policy.model import Policy
from rlab.engine.rewards.rubric import Rubric
from rlab.engine.rewards.score_result import ScoreResult
from rlab.engine.rewards.scoring import score
from rlab.engine.rollout.play import Rollout, user_messages
from rlab.engine.types import Trajectory
from rlab.engine.types import Scenario
from rlab.store.errors import UsageError

BATCH_PROMPTS = 256
"""Sequences per sampling call at most: bounds memory on long splits."""


@dataclass(frozen=True)
class Sampling:
    """How completions are drawn. Units: tokens.

    temperature: 0 = greedy decoding. max_new_tokens: per completion (per
    turn in a multi-step episode). n: completions per example. seed: torch
    seed set before sampling.
    """

    temperature: float
    max_new_tokens: int
    n: int = 1
    seed: int = 0

    def manifest_fields(self) -> dict[str, Any]:
        """The locked-room sampling settings (the seed is recorded apart)."""
        return {"temperature": self.temperature, "max_new_tokens": self.max_new_tokens, "n": self.n}


@dataclass
class Attempt:
    """One scored completion (single-turn) or episode (multi-step).

    messages: the whole conversation (OpenAI-style dicts). completion: the
    policy's text (multi-step: its last turn). prompt_tokens /
    completion_tokens: lengths in tokens (0 when unknown, e.g. frozen
    completions). extra: fields carried over from a frozen completions line.
    """

    messages: list[dict]
    completion: str
    score: ScoreResult
    prompt_tokens: int = 0
    completion_tokens: int = 0
    truncated: bool = False
    extra: dict[str, Any] | None = None

    @property
    def reward(self) -> float:
        """The rubric's weighted reward."""
        return self.score.reward


def sample_and_score(policy: Policy, scenario: Scenario, examples: list[dict], rubric: Rubric,
                     sampling: Sampling) -> list[list[Attempt]]:
    """``sampling.n`` scored attempts per example, in example order.

    The run's own rollout and scoring path (engine.rollout.play,
    engine.rewards.scoring), in chunks of at most ``BATCH_PROMPTS`` sequences:
    single-turn completions, or ``n`` episodes per example from the same
    initial state for multi-step scenarios.
    """
    torch.manual_seed(sampling.seed)
    rollout = Rollout(policy, scenario, RunConfig(max_new_tokens=sampling.max_new_tokens))
    chunk = max(1, BATCH_PROMPTS // sampling.n)
    attempts: list[list[Attempt]] = []
    for start in range(0, len(examples), chunk):
        rollouts = rollout.play(examples[start:start + chunk], group_size=sampling.n,
                                temperature=sampling.temperature)
        scores = iter(score(rollouts, rubric).scores)
        attempts += [[_attempt(t, next(scores), rollouts.multi_step) for t in group] for group in rollouts.groups]
    return attempts


def _attempt(trajectory: Trajectory, scored: ScoreResult, multi_step: bool) -> Attempt:
    turns = trajectory.turns
    return Attempt(trajectory.messages, turns[-1].text if turns else "", scored,
                   prompt_tokens=0 if multi_step or not turns else len(turns[0].prompt_ids),
                   completion_tokens=trajectory.completion_tokens, truncated=trajectory.truncated)


def score_frozen(scenario, examples: list[dict], completions: list[str], rubric: Rubric,
                 extras: list[dict[str, Any]]) -> list[list[Attempt]]:
    """One scored attempt per example from frozen completion texts (single-turn).

    Raises:
        ValueError: the scenario is multi-step (an episode cannot be frozen
            as one completion text).
    """
    if scenario.multi_step:
        raise UsageError(f"scenario {scenario.name!r} is multi-step: its episodes cannot be scored "
                         "from frozen completion texts; evaluate a model instead")
    scores = rubric.score_group(examples, completions)
    return [[Attempt(user_messages(ex, scenario.system_prompt) + [{"role": "assistant", "content": text}],
                     text, score, extra=extra)]
            for ex, text, score, extra in zip(examples, completions, scores, extras)]
