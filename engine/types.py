"""Plain data passed between the policy, the rollout code and the trainer."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Sample:
    """One sampled completion.

    token_ids: the completion's token ids (EOS included when it was sampled).
    text: the decoded completion, special tokens removed.
    logprobs: log-probability (nats) of each sampled token under the sampling
        distribution (temperature applied), one per entry of ``token_ids``.
    truncated: True when generation stopped at ``max_new_tokens`` before EOS.
    """

    token_ids: list[int]
    text: str
    logprobs: list[float]
    truncated: bool


@dataclass
class TrainSample:
    """One policy-gradient unit: a context, the tokens to train, an advantage.

    For a single-turn trajectory, ``prompt_ids`` is the rendered prompt; for a
    turn of a multi-step episode it is the whole conversation before that
    assistant turn, so only the turn's own assistant tokens are trained.
    ``old_logprobs`` (nats, one per completion token) come from the sampling
    policy and form the denominator of the importance ratio.
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    old_logprobs: list[float]
    advantage: float
