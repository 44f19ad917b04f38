"""One step's rollouts as a batch: store records and trainer samples.

Each trajectory becomes a ``TrajectoryRecord`` (multi-step: with one
``TurnRecord`` per turn holding r_t, R_t, A^E, A^S, A and its anchor group),
each group a ``GroupRecord`` (with the judge's verdict when there is one),
and each trajectory one :class:`~rlab.engine.types.TrainSample`: a
multi-step episode is one sequence (its assistant turns trained, the
observations between them masked out, each turn's tokens carrying that
turn's advantage), so one forward pass covers the whole episode.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rlab.engine.rewards.judge.ruler import JudgeResult
from rlab.engine.rewards.scoring import Scored
from rlab.engine.rollout.play import prompt_text
from rlab.engine.train.advantages import RolloutAdvantages
from rlab.engine.train.gigpo import GiGPOResult
from rlab.engine.types import Rollouts, TrainSample, Trajectory
from rlab.store.records import GroupRecord, ToolCallRecord, TrajectoryRecord, TurnRecord


@dataclass
class StepBatch:
    """What one step's rollouts produced, ready to store and train on.

    groups: store records, one per example (each trajectory's record holds
    the reward its advantage was computed from). samples: trainer inputs (one
    per trajectory: a multi-step episode trains as one sequence). metrics:
    extra per-step metrics (judge, GiGPO).
    """

    groups: list[GroupRecord]
    samples: list[TrainSample]
    metrics: dict[str, float] = field(default_factory=dict)

    def keep_policy_logprobs(self) -> None:
        """After the update: each single-turn trajectory's record gets the trained policy's
        log-probs of its tokens (``TrainSample.policy_logprobs``), beside the sampler's, so
        the inspector can shade the mismatch token by token. A single-turn step has one
        sample per trajectory, in order; a multi-step episode keeps no token columns."""
        records = [t for g in self.groups for t in g.trajectories]
        if len(records) != len(self.samples):
            return
        for record, sample in zip(records, self.samples):
            measured = sample.policy_logprobs
            if record.logprobs is not None and measured is not None and len(measured) == len(record.logprobs):
                record.policy_logprobs = measured


def to_batch(rollouts: Rollouts, scored: Scored, advantages: RolloutAdvantages, version: int, *,
             per_turn: bool = False) -> StepBatch:
    """Store records, trainer samples and per-step metrics of one step.

    ``version`` is the reward version the rollouts were scored with; every
    trajectory record carries it (its success verdict is the recorder's:
    ``engine.recorder``). Samples: one sequence per episode
    (:func:`episode_samples`), or with ``per_turn`` one per turn
    (:func:`train_samples`, the reference the sequence path is tested
    against; the same loss, several times the compute).
    """
    trajectories = rollouts.trajectories()
    g = rollouts.group_size
    groups = []
    for i, (example, group) in enumerate(zip(rollouts.examples, rollouts.groups)):
        records = [_trajectory_record(j, t, scored, advantages, i * g + j, version)
                   for j, t in enumerate(group)]
        record = GroupRecord(index=i, example_id=example["id"], prompt=prompt_text(example),
                             trajectories=records, example=example,
                             initial_state_key=repr(group[0].initial_state_key) if rollouts.multi_step else None)
        if scored.judged is not None:
            _attach_verdict(record, scored.judged.results[i])
        groups.append(record)
    samples = (train_samples(trajectories, advantages.per_turn) if per_turn
               else episode_samples(trajectories, advantages.per_turn))
    return StepBatch(groups, samples, _metrics(rollouts, scored, advantages))


def train_samples(trajectories: Sequence[Trajectory], advantages: Sequence[np.ndarray]) -> list[TrainSample]:
    """One trainer sample per turn: the context before it as prompt, its own tokens trained.

    Args:
        trajectories: the trajectories, in order.
        advantages: per trajectory, a (T_i,) float array, one value per turn.

    Raises:
        ValueError: the advantages do not have one value per turn.
    """
    _check_per_turn(trajectories, advantages)
    return [TrainSample(prompt_ids=turn.prompt_ids, completion_ids=turn.completion_ids,
                        old_logprobs=turn.logprobs, advantage=float(a))
            for t, adv in zip(trajectories, advantages) for turn, a in zip(t.turns, adv)]


def episode_samples(trajectories: Sequence[Trajectory], advantages: Sequence[np.ndarray]) -> list[TrainSample]:
    """One trainer sample per episode: all its assistant turns in one sequence.

    The sequence is the first turn's context (the prompt), then each turn's
    sampled tokens (trained: loss mask 1, advantage = that turn's value,
    old log-probs from sampling) and the tokens the next turn's context adds
    (the observation: mask 0). Turn t+1's context must extend turn t's
    context plus its sampled tokens, token for token, so every trained token
    sees exactly the context it was sampled in; where a chat template
    re-renders earlier turns differently, a new sample starts at that turn
    (the per-turn layout is the limiting case).

    Args:
        trajectories: the trajectories, in order.
        advantages: per trajectory, a (T_i,) float array, one value per turn.

    Returns:
        One sample per trajectory (more where a context does not extend the last).

    Raises:
        ValueError: the advantages do not have one value per turn.
    """
    _check_per_turn(trajectories, advantages)
    samples: list[TrainSample] = []
    for trajectory, adv in zip(trajectories, advantages):
        current: TrainSample | None = None
        for turn, a in zip(trajectory.turns, adv):
            if current is None or not _extends(turn.prompt_ids, current):
                current = TrainSample(list(turn.prompt_ids), [], [], token_advantages=[], loss_mask=[])
                samples.append(current)
            _append_turn(current, turn.prompt_ids, turn.completion_ids, turn.logprobs, float(a))
    return samples


def _extends(context: list[int], sample: TrainSample) -> bool:
    """``context`` starts with the sample's prompt and completion so far."""
    n_prompt, n = len(sample.prompt_ids), len(sample.prompt_ids) + len(sample.completion_ids)
    return (len(context) >= n and context[:n_prompt] == sample.prompt_ids
            and context[n_prompt:n] == sample.completion_ids)


def _append_turn(sample: TrainSample, context: list[int], tokens: list[int], logprobs: list[float],
                 advantage: float) -> None:
    """Add the observation tokens ``context`` has beyond ``sample`` (untrained), then the turn's tokens."""
    assert sample.token_advantages is not None and sample.loss_mask is not None
    gap = context[len(sample.prompt_ids) + len(sample.completion_ids):]
    sample.completion_ids += gap + list(tokens)
    sample.old_logprobs += [0.0] * len(gap) + list(logprobs)
    sample.token_advantages += [0.0] * len(gap) + [advantage] * len(tokens)
    sample.loss_mask += [0.0] * len(gap) + [1.0] * len(tokens)


def _check_per_turn(trajectories: Sequence[Trajectory], advantages: Sequence[np.ndarray]) -> None:
    if len(advantages) != len(trajectories) or any(
            len(a) != len(t.turns) for t, a in zip(trajectories, advantages)):
        raise ValueError("advantages must hold one array per trajectory with one value per turn")


def _trajectory_record(index: int, trajectory: Trajectory, scored: Scored, advantages: RolloutAdvantages,
                       k: int, version: int) -> TrajectoryRecord:
    turns = trajectory.turns
    score = scored.scores[k]
    gigpo = advantages.gigpo
    return TrajectoryRecord(
        index=index, messages=trajectory.messages, completion=turns[-1].text if turns else "",
        # an errored score's 0 is no reward: stored as none, its error in the details
        reward=None if score.error else float(advantages.rewards.reshape(-1)[k]), components=score.components,
        details=score.details,
        advantage=float(advantages.per_trajectory[k]), prompt_tokens=len(turns[0].prompt_ids) if turns else 0,
        completion_tokens=trajectory.completion_tokens, reward_version=version, truncated=trajectory.truncated,
        turns=[] if gigpo is None else _turn_records(trajectory, gigpo, advantages.per_turn[k],
                                                     scored.turn_rewards[k], k),
        tool_calls=tool_call_records(trajectory) if trajectory.tools else None,
        **_token_fields(trajectory))


def tool_call_records(trajectory: Trajectory) -> list[ToolCallRecord]:
    """A tool episode's calls as the store keeps them, turn by turn."""
    return [ToolCallRecord(turn=t, index=k, call_id=c.id, name=c.name, arguments=c.arguments, result=c.result,
                           error=c.error, seconds=c.seconds)
            for t, turn in enumerate(trajectory.turns) for k, c in enumerate(turn.tool_calls)]


def _token_fields(trajectory: Trajectory) -> dict:
    """Per-token log-probs and text offsets of a single-turn trajectory, when known."""
    turn = trajectory.turns[0] if len(trajectory.turns) == 1 else None
    if turn is None or turn.token_ends is None:
        return {}
    return {"logprobs": list(turn.logprobs), "token_ends": turn.token_ends}


def _turn_records(trajectory: Trajectory, result: GiGPOResult, per_turn: np.ndarray, rewards: np.ndarray,
                  k: int) -> list[TurnRecord]:
    """One record per turn; ``reward`` is the turn's trained reward r_t (``engine.rewards.turns``)."""
    return [TurnRecord(t=t, state_key=repr(turn.state_key), reward=float(rewards[t]), ret=float(result.returns[k][t]),
                       adv_episode=float(result.episode[k]), adv_step=float(result.step[k][t]),
                       advantage=float(per_turn[t]), anchor_id=int(result.anchor[k][t]),
                       anchor_size=int(result.anchor_size[k][t]), env_reward=float(turn.reward))
            for t, turn in enumerate(trajectory.turns)]


def _attach_verdict(group: GroupRecord, verdict: JudgeResult) -> None:
    """Copy a judge result onto the group's records (status, scores, ranks, explanations)."""
    group.judge_status = verdict.status
    group.judge_error = verdict.error
    if verdict.scores is None or verdict.ranks is None:  # the call failed
        return
    for j, trajectory in enumerate(group.trajectories):
        trajectory.judge_score = verdict.scores[j]
        trajectory.judge_rank = verdict.ranks[j]
        trajectory.judge_explanation = verdict.explanations[j]
        trajectory.components = {**trajectory.components, "judge": verdict.scores[j]}


def _metrics(rollouts: Rollouts, scored: Scored, advantages: RolloutAdvantages) -> dict[str, float]:
    metrics = {} if scored.judged is None else scored.judged.metrics()
    if advantages.gigpo is not None:
        sizes = advantages.gigpo.anchor_size_flat
        metrics["gigpo/anchor_shared_frac"] = float(np.mean(sizes > 1)) if len(sizes) else 0.0
    return metrics
