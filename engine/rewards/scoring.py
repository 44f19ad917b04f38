"""Scoring one step's rollouts: the rubric for every trajectory, the judge per group.

The rubric (weighted reward functions) scores every trajectory; with a judge,
each group is also ranked in one RULER call and the judge's scores are mixed
into the reward (``rlab.engine.rewards.judge.mix``). A group whose judge call
failed keeps its verifier rewards and is flagged, never dropped.

One path for every task kind: a multi-step episode is scored like a
single-turn completion (its whole conversation is the completion; the judge
ranks whole conversations, RULER style), and the environment's own per-turn
rewards reach the rubric only as an input (``example[ENV_REWARDS_KEY]``), so
the rubric's weights, which a reward edit changes, decide what trains.
Per-turn rewards come from ``rlab.engine.rewards.turns``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from rlab.engine.rewards.helpers import ENV_REWARDS_KEY, TOOL_CALLS_KEY
from rlab.engine.rewards.judge.mix import JudgedStep, judge_groups
from rlab.engine.rewards.judge.ruler import RulerJudge
from rlab.engine.rewards.score_result import ScoreResult
from rlab.engine.rewards.signatures import COMPLETION_IDS_KEY
from rlab.engine.rewards.turns import check_step_rewards, turn_rewards
from rlab.engine.types import Example, Rollouts, Trajectory


class Scorer(Protocol):
    """What scores trajectories: a ``Rubric`` in this process, or a
    ``ProcessRubric`` that scores user code in the scoring process."""

    def score_group(self, examples: Sequence[Example], completions: Sequence[Any]) -> list[ScoreResult]:
        """One ScoreResult per (example, completion), in order."""
        ...


@dataclass
class Scored:
    """The scores of one step's rollouts.

    scores: one ScoreResult per trajectory, aligned with
    ``Rollouts.trajectories()``. rewards: (P, G) float64 rubric rewards,
    judge-mixed where a judge is on. judged: the judge's verdicts, or None.
    errors: reward-function error messages, each prefixed with its example id.
    turn_rewards: per trajectory, a (T_i,) float64 array of per-turn rewards
    summing to its reward (:func:`rlab.engine.rewards.turns.turn_rewards`;
    single-turn: the reward itself).
    """

    scores: list[ScoreResult]
    rewards: np.ndarray
    judged: JudgedStep | None
    errors: list[str]
    turn_rewards: list[np.ndarray]

    @property
    def judge_failed(self) -> np.ndarray:
        """(P,) bool: groups whose judge call failed (all False without a judge)."""
        if self.judged is None:
            return np.zeros(self.rewards.shape[0], dtype=bool)
        return ~self.judged.ok

    @property
    def errored_groups(self) -> np.ndarray:
        """(P,) bool: groups where a reward function errored; an error's 0 is
        not a reward, so these groups are not trained on."""
        errored = np.array([s.error is not None for s in self.scores], dtype=bool)
        return np.asarray(errored.reshape(self.rewards.shape[0], -1).any(axis=1), dtype=bool)



def score(rollouts: Rollouts, rubric: Scorer, judge: RulerJudge | None = None,
          judge_weight: float = 1.0) -> Scored:
    """Score every trajectory with ``rubric``; rank each group with ``judge`` if given.

    Args:
        rollouts: P groups of G trajectories.
        rubric: the run's current reward functions and weights.
        judge: a RULER judge, or None.
        judge_weight: the judge's share of the reward in [0, 1] (0: verifier
            only, 1: judge only).
    """
    trajectories = rollouts.trajectories()
    scores = failed_rollouts(rubric.score_group(scorer_examples(rollouts), rollouts.scorer_inputs()), trajectories)
    if rollouts.multi_step:
        scores = [check_step_rewards(s, len(t.turns)) for s, t in zip(scores, trajectories)]
    rewards = np.array([s.reward for s in scores], dtype=np.float64).reshape(len(rollouts.groups), -1)
    errors = [f"example {ex.get('id')!r}: {s.error}" for ex, s in zip(rollouts.flat_examples(), scores) if s.error]
    judged = None
    if judge is not None:
        conversations = [[t.messages for t in group] for group in rollouts.groups]
        judged = judge_groups(judge, judge_weight, conversations, rewards)
        rewards = np.where(np.array([t.error is not None for t in trajectories]).reshape(rewards.shape),
                           0.0, judged.rewards)
    flat = rewards.reshape(-1)
    per_turn = ([turn_rewards(s, r, len(t.turns)) for s, r, t in zip(scores, flat, trajectories)]
                if rollouts.multi_step else [np.array([r]) for r in flat])
    return Scored(scores, rewards, judged, errors, per_turn)


def failed_rollouts(scores: list[ScoreResult], trajectories: Sequence[Trajectory]) -> list[ScoreResult]:
    """``scores`` with each failed rollout (``Trajectory.error``: a user agent's rollout that
    raised, hung, ...) scored 0 in every component, its error and notes in ``details``
    (``agent_error``, ``agent_notes``); the judge's share of its reward is dropped too
    (:func:`score`). Not a reward error: its group still trains on the others."""
    out = []
    for s, t in zip(scores, trajectories):
        if t.notes:
            s = dataclasses.replace(s, details={**s.details, "agent_notes": t.notes})
        if t.error is not None:
            s = dataclasses.replace(s, reward=0.0, components=dict.fromkeys(s.components, 0.0), step_rewards=None,
                                    details={**s.details, "agent_error": t.error})
        out.append(s)
    return out


def scorer_examples(rollouts: Rollouts) -> list[Example]:
    """Each trajectory's example as its reward functions receive it: single-turn
    examples also carry the completion's token ids (TRL-style functions ask for
    them), multi-step ones the environment's per-turn rewards (``ENV_REWARDS_KEY``)
    and, in a tool task, the calls of each turn (``TOOL_CALLS_KEY``)."""
    if rollouts.multi_step:
        return [{**ex, ENV_REWARDS_KEY: t.step_rewards, **({TOOL_CALLS_KEY: tool_turns(t)} if t.tools else {})}
                for ex, t in zip(rollouts.flat_examples(), rollouts.trajectories())]
    return [{**ex, COMPLETION_IDS_KEY: t.turns[-1].completion_ids}
            for ex, t in zip(rollouts.flat_examples(), rollouts.trajectories())]


def tool_turns(trajectory: Trajectory) -> list[list[dict[str, Any]]]:
    """A tool episode's calls as reward functions read them (``TOOL_CALLS_KEY``): per turn, per call,
    ``{"name", "arguments", "result", "error", "seconds"}``."""
    return [[{"name": c.name, "arguments": c.arguments, "result": c.result, "error": c.error,
              "seconds": c.seconds} for c in turn.tool_calls] for turn in trajectory.turns]
