"""A step's groups played by the user's agent through the endpoint.

For each step :class:`AgentRollout` opens one rollout key per trajectory
(P examples x G), a :class:`~rlab.engine.agent.session.RolloutSession` on
the run's endpoint with a fresh continuous batcher over the current weights,
and sends every (key, base URL, example) to the agent process in one
request: all P x G rollouts run there at once, each agent at its own turn,
and their requests decode together. When the agent process answers (or its
time limit passes) the session closes, and each record with what its rollout
returned becomes a trajectory (``engine.agent.trajectory``).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from rlab.engine.agent.endpoint import Endpoint
from rlab.engine.agent.process import AgentProcess, RolloutResult
from rlab.engine.agent.forwarding import ForwardingBatcher
from rlab.engine.agent.session import REQUESTS_PER_TURN, Batcher, RolloutSession, SessionLimits
from rlab.engine.agent.trajectory import agent_trajectory
from rlab.engine.policy.continuous import BatcherStats, ContinuousBatcher
from rlab.engine.policy.model import Policy
from rlab.engine.types import Example, Sampler, Trajectory

#: The model name the endpoint serves (what a rollout is told to ask for).
MODEL_NAME = "rlab-policy"


class AgentRollout:
    """The user's agent file, its process and the run's endpoint (started on first use).

    Args:
        sampler: the run's sampler: the policy itself (the endpoint decodes with
            its continuous batcher) or a vLLM backend (requests go on to the
            server, which batches them, and its current LoRA adapter answers).
        tokenizer: the policy's tokenizer (token texts of ``logprobs``).
        file: the rollout file (``async def rollout(client, model, example)``).
        timeout_s: seconds per rollout.
        max_new_tokens: the token budget of one completion.
        max_turns: the task's assistant turns per episode; a rollout may make
            :data:`REQUESTS_PER_TURN` times as many requests.

    Attributes:
        metrics: the last play's figures: ``endpoint/requests``,
            ``endpoint/batch_width`` (mean rows per decoding step; 0 behind
            vLLM, which batches on its side), ``endpoint/queue_wait_s`` (mean
            seconds from arrival to prefill), ``endpoint/tokens_per_s``
            (completion tokens over the play's wall seconds), ``agent/errors``
            and ``agent/errors/<kind>``.
    """

    def __init__(self, sampler: Sampler, tokenizer: Any, file: Path, *, timeout_s: float, max_new_tokens: int,
                 max_turns: int) -> None:
        self.sampler, self.tokenizer = sampler, tokenizer
        self.process = AgentProcess(file, timeout_s=timeout_s)
        self.max_new_tokens, self.max_turns = max_new_tokens, max_turns
        self.endpoint: Endpoint | None = None
        self.metrics: dict[str, float] = {}

    def play(self, examples: list[Example], group_size: int, temperature: float) -> list[list[Trajectory]]:
        """``group_size`` rollouts of each example (temperature 0: held-out, every request greedy)."""
        endpoint = self._started()
        keys = [[secrets.token_hex(8) for _ in range(group_size)] for _ in examples]
        batcher = self._batcher()
        limits = SessionLimits(MODEL_NAME, self.max_new_tokens, REQUESTS_PER_TURN * self.max_turns, temperature,
                               greedy=temperature <= 0)
        session = endpoint.session = RolloutSession(self.sampler, self.tokenizer, batcher, limits,
                                                    [k for g in keys for k in g])
        start = time.monotonic()
        try:
            results = self.process.run([(k, endpoint.base_url(k), ex) for ex, group in zip(examples, keys)
                                        for k in group], model=MODEL_NAME, api_key=endpoint.key)
        finally:
            endpoint.session = None
            batcher.close()
        missing = RolloutResult(None, error=("hung", "the agent process gave no result for this rollout"))
        groups = [[agent_trajectory(session.records[k], results.get(k, missing), self.tokenizer) for k in group]
                  for group in keys]
        self.metrics = _metrics(batcher.stats, time.monotonic() - start, groups)
        return groups

    def _batcher(self) -> Batcher:
        if isinstance(self.sampler, Policy):
            return ContinuousBatcher(self.sampler.sampling_model(), self.tokenizer, pad_id=self.sampler.pad_id,
                                     eos_id=self.sampler.eos_id, device=self.sampler.device,
                                     threads=torch.get_num_threads())
        return ForwardingBatcher(self.sampler)

    def check(self) -> dict[str, str]:
        """Load the rollout file in its process; what the run's manifest records of it
        (``file``, ``sha256`` of its text: two runs' agents differ when these do).

        Raises:
            AgentFileError: the file does not load or defines no fitting ``rollout``.
        """
        self.process.check()
        return {"file": str(self.process.file), "sha256": hashlib.sha256(self.process.source.encode()).hexdigest()}

    def _started(self) -> Endpoint:
        if self.endpoint is None:
            self.process.check()
            self.endpoint = Endpoint(MODEL_NAME)
            self.endpoint.start()
        return self.endpoint

    def close(self) -> None:
        """Stop the agent process and the endpoint (a later play starts them again)."""
        self.process.close()
        if self.endpoint is not None:
            self.endpoint.close()
            self.endpoint = None


def _metrics(stats: BatcherStats, seconds: float, groups: list[list[Trajectory]]) -> dict[str, float]:
    errors = Counter(t.error.split(":", 1)[0] for group in groups for t in group if t.error is not None)
    return {"endpoint/requests": float(stats.requests),
            "endpoint/batch_width": stats.row_steps / stats.decode_steps if stats.decode_steps else 0.0,
            "endpoint/queue_wait_s": stats.queue_wait_s / stats.requests if stats.requests else 0.0,
            "endpoint/tokens_per_s": stats.tokens / seconds if seconds > 0 else 0.0,
            "agent/errors": float(sum(errors.values())),
            **{f"agent/errors/{kind}": float(n) for kind, n in errors.items()}}
