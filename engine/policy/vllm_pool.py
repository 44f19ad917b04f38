"""Several vLLM rollout servers as one sampler (data parallel rollouts).

``--vllm-url URL1,URL2,...``: each server serves the same base model. A
step's rollouts are split by group (a run of identical consecutive prompts:
``Rollout.play`` asks for G copies of each prompt in a row), so a group's
prompt prefix is cached on one server; groups are dealt to servers in
contiguous, nearly equal shares and sampled concurrently (one thread per
server; the HTTP calls release the GIL). After each update every server
loads the new adapter. A server that stops answering (connection refused,
time-out, HTTP 5xx after the client's retries) is dropped: its share is sent
again to the others, ``on_drop`` is told (the run writes a
``server_dropped`` event), and the run goes on while one server is left.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rlab.engine.policy.vllm import ServerDown, VLLMBackend, VLLMError, adapter_name, save_step_adapter
from rlab.engine.policy.kv import PrefixCache
from rlab.engine.types import Sample
from rlab.store.errors import UsageError

#: ``on_drop(base_url, reason)``: called once per dropped server.
DropHandler = Callable[[str, str], None]


def split_urls(text: str) -> list[str]:
    """The URLs of a comma-separated ``--vllm-url`` (blanks dropped).

    Raises:
        UsageError: no URL, or the same URL twice.
    """
    urls = [u.strip() for u in text.split(",") if u.strip()]
    if not urls:
        raise UsageError(f"--vllm-url {text!r} names no server; pass http://HOST:PORT/v1[,http://...]")
    if len(set(urls)) != len(urls):
        raise UsageError(f"--vllm-url {text!r} names a server twice; each must appear once")
    return urls


def group_spans(prompt_ids: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """``[start, end)`` index spans of runs of identical consecutive prompts (the groups)."""
    spans: list[tuple[int, int]] = []
    for i, prompt in enumerate(prompt_ids):
        if spans and prompt_ids[spans[-1][0]] == prompt:
            spans[-1] = (spans[-1][0], i + 1)
        else:
            spans.append((i, i + 1))
    return spans


def deal(spans: list[tuple[int, int]], n: int) -> list[tuple[int, int]]:
    """Split ``spans`` into at most ``n`` contiguous index ranges of nearly equal group count."""
    per, extra = divmod(len(spans), n)
    ranges, first = [], 0
    for k in range(n):
        count = per + (k < extra)
        if count:
            ranges.append((spans[first][0], spans[first + count - 1][1]))
        first += count
    return ranges


class VLLMPool:
    """One or more :class:`VLLMBackend` s behind the ``Sampler`` interface.

    Args:
        backends: one per server, all serving the same base model.
        on_drop: told ``(base_url, reason)`` when a server is dropped.

    Attributes:
        backends: the servers still in use, in ``--vllm-url`` order.
        dropped: ``(base_url, reason)`` of each dropped server, in order.
    """

    def __init__(self, backends: Sequence[VLLMBackend], on_drop: DropHandler | None = None) -> None:
        if not backends:
            raise ValueError("VLLMPool needs at least one backend")
        self.backends = list(backends)
        self.on_drop = on_drop
        self.dropped: list[tuple[str, str]] = []
        self._adapter_path: Path | None = None

    @property
    def current_model(self) -> str:
        """The model name requests go to (the first server's; all hold the same adapter)."""
        return self.backends[0].current_model

    def render(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        """Prompt token ids (:meth:`VLLMBackend.render`)."""
        return self.backends[0].render(messages, tools)

    def served_models(self) -> list[dict]:
        """Every server's ``GET /v1/models`` (fails fast when one is not there), the first's answer.

        Raises:
            VLLMError: a server cannot be reached at start (nothing is dropped yet).
        """
        answers = [b.served_models() for b in self.backends]
        return answers[0]

    def sample(self, prompt_ids: list[list[int]], *, max_new_tokens: int, temperature: float = 1.0,
               cache: PrefixCache | None = None) -> list[Sample]:
        """One completion per prompt, groups spread over the servers; prompt order kept.
        ``cache`` is ignored: each server caches prompt prefixes itself.

        Raises:
            ValueError: empty prompts or a non-positive budget.
            VLLMError: the last server failed, or a server refused the request
                (a 4xx: a bug or bad settings, not a dead server).
        """
        if not prompt_ids:
            raise ValueError("sample needs at least one prompt")
        while True:
            ranges = deal(group_spans(prompt_ids), len(self.backends))
            backends = self.backends[:len(ranges)]
            with ThreadPoolExecutor(max_workers=len(ranges)) as pool:
                futures = [pool.submit(b.sample, prompt_ids[lo:hi], max_new_tokens=max_new_tokens,
                                       temperature=temperature) for b, (lo, hi) in zip(backends, ranges)]
                outcomes = [_outcome(f) for f in futures]
            down = [(b, err) for b, err in zip(backends, outcomes) if isinstance(err, ServerDown)]
            if not down:
                return [s for part in outcomes for s in _samples(part)]
            for backend, err in down:
                self._drop(backend, err)

    def sync_policy(self, model, step: int, adapter_dir: str | Path) -> str:
        """Save ``model``'s adapter once and load it into every server; return its served name.

        A server that is down is dropped; the previous adapter's files are
        deleted once every server has moved on.

        Raises:
            VLLMError: ``model`` has no LoRA adapter, a server refused the
                adapter, or the last server is down (the previous adapter stays).
        """
        path = save_step_adapter(model, step, adapter_dir)
        name = adapter_name(step)
        for backend in list(self.backends):
            try:
                backend.switch_adapter(name, path)
            except ServerDown as err:
                self._drop(backend, err)
        previous, self._adapter_path = self._adapter_path, path
        if previous is not None and previous != path:
            shutil.rmtree(previous, ignore_errors=True)
        return name

    def close(self) -> None:
        """Close every server's HTTP connections."""
        for backend in self.backends:
            backend.close()

    def _drop(self, backend: VLLMBackend, err: ServerDown) -> None:
        if len(self.backends) == 1:
            raise err
        self.backends.remove(backend)
        self.dropped.append((backend.base_url, str(err)))
        backend.close()
        if self.on_drop is not None:
            self.on_drop(backend.base_url, str(err))


def _outcome(future) -> list[Sample] | VLLMError:
    try:
        return future.result()
    except ServerDown as err:
        return err


def _samples(part: list[Sample] | VLLMError) -> list[Sample]:
    assert not isinstance(part, VLLMError)
    return part
