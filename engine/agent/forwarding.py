"""The endpoint in front of a sampler that batches on its own side: a vLLM server.

A vLLM server batches concurrent requests itself (continuous batching, its
prefix cache shared across them), so :class:`ForwardingBatcher` sends each
request on as it comes, on a thread of its own, to the run's
:class:`~rlab.engine.policy.vllm.VLLMBackend`: the current policy's LoRA
adapter answers, with its token ids and log-probs as sampled. What the
backend's completions call does not take (``top_p`` below 1, ``seed``,
``stop``) is refused by name rather than ignored.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from rlab.engine.policy.continuous import BatcherStats, GenerationRequest, SamplerStopped
from rlab.engine.types import Sample, Sampler

#: Requests in flight at most (more wait for a thread); the server queues what it cannot run.
MAX_IN_FLIGHT = 256


class ForwardingBatcher:
    """Each request one ``sampler.sample`` call on a worker thread.

    ``stats`` counts requests, tokens and queue wait (arrival to the call);
    the decoding batch is the server's, so ``decode_steps`` stays 0.
    """

    def __init__(self, sampler: Sampler) -> None:
        self.sampler = sampler
        self.stats = BatcherStats()
        self._pool = ThreadPoolExecutor(MAX_IN_FLIGHT, thread_name_prefix="rlab-forward")
        self._lock = threading.Lock()
        self._closed = False

    @staticmethod
    def refuses(request: GenerationRequest) -> str | None:
        """Why ``request`` cannot be served this way, or None."""
        unsupported = [name for name, on in (("top_p", request.top_p < 1), ("seed", request.seed is not None),
                                             ("stop", bool(request.stop))) if on]
        return (f"{', '.join(unsupported)} is not served with --backend vllm; call without it"
                if unsupported else None)

    def submit(self, request: GenerationRequest) -> Future[list[Sample]]:
        """Send ``request`` on; the future holds its ``n`` samples."""
        arrived = time.monotonic()

        def call() -> list[Sample]:
            if self._closed:
                raise SamplerStopped("the endpoint's sampler stopped: the step ended")
            started = time.monotonic()
            samples = self.sampler.sample([request.prompt_ids] * request.n, max_new_tokens=request.max_new_tokens,
                                          temperature=request.temperature)
            with self._lock:
                self.stats.requests += 1
                self.stats.tokens += sum(len(s.token_ids) for s in samples)
                self.stats.queue_wait_s += started - arrived
                self.stats.busy_s += time.monotonic() - started
            return samples

        return self._pool.submit(call)

    def close(self) -> None:
        """Refuse what has not started; wait for the calls in flight."""
        self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
