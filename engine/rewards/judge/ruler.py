"""RULER judge: one LLM call scores a whole group of trajectories.

RULER (Relative Universal LLM-Elicited Rewards, OpenPipe ART, 2025): the
judge sees all G trajectories of a group side by side and gives each a score
in [0, 1]; GRPO only needs scores that rank well *within* a group. The
prompt is ``engine.rewards.judge.prompt``'s; the answer, its schema and how
it is read are ``engine.rewards.judge.answer``'s.

Works against any OpenAI-compatible Chat Completions endpoint (OpenAI, vLLM's
``vllm serve``, Ollama, llama.cpp's server) through ``openai.AsyncOpenAI``.
Robustness rules (see :class:`RulerJudge`): scores are matched by
trajectory_id, never by position; out-of-range scales are rescaled by a fixed
rule; prose around the JSON is tolerated; transient HTTP errors, failed
connections and time-outs are retried by the openai client (its backoff, the
server's ``Retry-After``); this module only re-asks, at once, for an answer
it cannot read (ART's RULER has no retry loop of its own); a group that still
fails comes back with ``scores=None`` and an error, never dropped.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import openai

from rlab.engine.run.config import JudgeSettings
from rlab.engine.rewards.judge.answer import (EXPLANATION_MAX_CHARS, JudgeAnswer, JudgeAnswerError, ScoredTrajectory,
                                              answer_schema, answer_token_budget, extract_json_object,
                                              normalize_scores, parse_answer, response_format)
from rlab.engine.rewards.judge.cache import JudgeCache, default_cache_dir, request_hash
from rlab.engine.rewards.judge.http_client import AttemptLog, JudgeHttpClient
from rlab.engine.rewards.judge.prompt import (DEFAULT_RUBRIC, Message, build_judge_messages, shared_prefix_length,
                                              validate_trajectories)

#: The judge's public names. This module stays the one a script imports the judge
#: from, as it was before the prompt and the answer got modules of their own.
__all__ = ["DEFAULT_RUBRIC", "EXPLANATION_MAX_CHARS", "JudgeAnswer", "JudgeAnswerError", "JudgeResult", "Message",
           "RulerJudge", "ScoredTrajectory", "answer_schema", "answer_token_budget", "build_judge_messages",
           "extract_json_object", "normalize_scores", "parse_answer", "response_format", "shared_prefix_length",
           "validate_trajectories"]

#: ``JudgeResult.response_mode`` values: the JSON schema sent as
#: ``response_format``, the schema in the prompt (a server that refused
#: response_format), or an answer from the disk cache.
RESPONSE_MODES = ("json_schema", "prompt", "cache")


@dataclass
class JudgeResult:
    """Outcome of one :meth:`RulerJudge.score_group` call.

    Attributes:
        scores: one float in [0, 1] per trajectory, in input order; None when
            the call failed.
        explanations: the judge's explanation per trajectory (input order);
            empty when the call failed.
        error: None on success, else what went wrong (after the last retry).
        raw: the judge's last raw answer text ("" if none arrived).
        model: the judge model name.
        request_hash: sha256 of the last request (the cache key).
        attempts: HTTP requests made, the openai client's own retries
            included (0 for a cache hit).
        latency_s: wall-clock seconds of the whole call, retries and backoff
            included.
        prompt_tokens / completion_tokens: usage summed over all attempts
            (failed ones were billed too); 0 for a cache hit.
        cost_usd: from the price table, summed over attempts; None when the
            model has no price; 0.0 for a cache hit.
        cached: the answer came from the disk cache.
        scale: the scale the judge answered on (1, 10 or 100; see
            ``engine.rewards.judge.answer.normalize_scores``); None when the
            call failed.
        attempt_errors: one message per failed attempt, oldest first.
        response_mode: how the last request asked for JSON: one of
            :data:`RESPONSE_MODES` (``judge_calls.response_mode`` in the store).
    """

    scores: list[float] | None
    explanations: list[str]
    error: str | None
    raw: str
    model: str
    request_hash: str
    attempts: int = 0
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float | None = None
    cached: bool = False
    scale: int | None = None
    attempt_errors: list[str] = field(default_factory=list)
    response_mode: str = "json_schema"

    @property
    def ok(self) -> bool:
        """True when every trajectory got a score."""
        return self.scores is not None

    @property
    def status(self) -> str:
        """``"ok"`` or ``"failed"``: ``GroupRecord.judge_status`` in the store
        (a failure is also written as a ``judge_failed`` event)."""
        return "ok" if self.ok else "failed"

    def call_fields(self) -> dict[str, Any]:
        """This call as keyword arguments of ``StoreWriter.write_judge_call``
        (request_hash, model, raw_response, latency_s, tokens, cost_usd, error,
        response_mode, attempts)."""
        return {
            "request_hash": self.request_hash,
            "model": self.model,
            "raw_response": self.raw,
            "latency_s": self.latency_s,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": self.cost_usd,
            "error": self.error,
            "response_mode": self.response_mode,
            "attempts": self.attempts,
        }

    @property
    def ranks(self) -> list[int] | None:
        """Competition ranks in input order: 1 is best, ties share the best
        rank ("1224"); None when the call failed."""
        if self.scores is None:
            return None
        return [1 + sum(other > s for other in self.scores) for s in self.scores]


def _refuses_response_format(exc: openai.APIStatusError) -> bool:
    # vLLM, llama.cpp and older servers answer 400/422, most naming the parameter,
    # some not ("Bad Request"): any 400/422 to a structured request earns one
    # retry asking for JSON in the prompt (a request that is bad for another
    # reason then fails again, without response_format, and is reported).
    return exc.status_code in (400, 422)


@dataclass
class _Tally:
    """What one score_group call has spent and seen so far."""

    http: AttemptLog = field(default_factory=AttemptLog)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    raw: str = ""
    key: str = ""
    mode: str = "json_schema"


class RulerJudge:
    """Scores groups of trajectories with one Chat Completions call per group.

    Args:
        model: the judge model name as the server knows it (e.g.
            ``"gpt-4.1-mini"``, ``"Qwen/Qwen2.5-7B-Instruct"``, ``"qwen2.5:7b"``).
        base_url: the server's OpenAI-compatible base URL (e.g.
            ``http://localhost:8000/v1`` for vLLM, ``http://localhost:11434/v1``
            for Ollama); None means OpenAI (or ``$OPENAI_BASE_URL``).
        api_key: None falls back to ``$OPENAI_API_KEY``, then to ``"EMPTY"``
            (local servers need no key). It is never logged nor put in results.
        rubric: grading standards in plain text; None uses
            ``engine.rewards.judge.prompt.DEFAULT_RUBRIC``.
        max_retries: the openai client's retries of one request (HTTP
            408/409/429/5xx, time-outs, failed connections); HTTP retries are
            the client's alone. Other HTTP errors (401, 404, ...) fail at once.
        reasks: the judge's own re-asks for an answer it cannot read (each a
            request the client may retry), so a group costs at most
            (reasks + 1) x (max_retries + 1) requests.
        timeout_s: per-request time limit, seconds, from connecting to the
            last byte (``engine.rewards.judge.http_client``).
        prices: model -> (USD per 1M input tokens, USD per 1M output tokens);
            without an entry for ``model`` the cost is None.
        cache_dir: where answers are cached; None is
            :func:`engine.rewards.judge.cache.default_cache_dir`.
        use_cache: False skips the disk cache entirely.

    A retry waits as the openai client decides (it has no public setting for
    it): the server's ``Retry-After`` (or ``retry-after-ms``) up to 2 minutes
    (a longer one is not retried), else 0.5 s doubling per retry up to 8 s,
    less up to 25 % jitter. A re-ask for an unreadable answer does not wait:
    the server answered, so it is up.

    If the server rejects the JSON-schema ``response_format`` (HTTP 400/422
    naming it), the judge switches, for the rest of its life, to asking for
    the JSON in the prompt and re-sends at once; that switch does not use up
    a retry.

    Raises:
        ValueError: ``max_retries`` or ``reasks`` < 0, ``timeout_s`` <= 0, or an empty model.
    """

    @classmethod
    def from_settings(cls, settings: JudgeSettings, rubric: str | None = None, **options: Any) -> RulerJudge:
        """A judge with a run's settings (``RunConfig.judge``); ``rubric`` is the
        scenario's ``judge_rubric`` if it has one (None: the default rubric);
        ``options`` go to the constructor (e.g. ``cache_dir``)."""
        return cls(
            settings.model, base_url=settings.base_url, rubric=rubric, max_retries=settings.max_retries,
            reasks=settings.reasks, timeout_s=settings.timeout_s, use_cache=settings.use_cache,
            prices={settings.model: settings.price} if settings.price else None, **options,
        )

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        rubric: str | None = None,
        max_retries: int = 3,
        timeout_s: float = 60.0,
        *,
        reasks: int = 1,
        prices: Mapping[str, tuple[float, float]] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        use_cache: bool = True,
    ) -> None:
        if not model:
            raise ValueError("model must name the judge model, e.g. 'gpt-4.1-mini'")
        if max_retries < 0 or reasks < 0:
            raise ValueError(f"max_retries and reasks must be >= 0, got {max_retries} and {reasks}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s}")
        self.model = model
        self.base_url = base_url
        self.rubric = rubric if rubric is not None else DEFAULT_RUBRIC
        self.max_retries, self.reasks = max_retries, reasks
        self.timeout_s = timeout_s
        self.prices = dict(prices or {})
        self.cache = JudgeCache(cache_dir or default_cache_dir()) if use_cache else None
        self.use_response_format = True
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        # One client per event loop: building one costs ~0.1 s of CPU (its
        # SSL context), and its connection pool belongs to the loop it ran on.
        self._client: openai.AsyncOpenAI | None = None
        self._client_loop: asyncio.AbstractEventLoop | None = None
        self._sync_loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        return f"RulerJudge(model={self.model!r}, base_url={self.base_url!r})"

    def _client_here(self) -> openai.AsyncOpenAI:
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            # timeout=None: the time limit is JudgeHttpClient's, a whole request's (httpx's is per read)
            self._client = openai.AsyncOpenAI(
                api_key=self._api_key, base_url=self.base_url, max_retries=self.max_retries,
                timeout=None, http_client=JudgeHttpClient(self.timeout_s),
            )
            self._client_loop = loop
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP client of the running loop (call before that loop ends)."""
        if self._client is not None and self._client_loop is asyncio.get_running_loop():
            await self._client.close()
            self._client = self._client_loop = None

    def close(self) -> None:
        """Close what the ``*_sync`` methods opened: their client and event loop."""
        if self._sync_loop is not None and not self._sync_loop.is_closed():
            if self._client is not None and self._client_loop is self._sync_loop:
                self._sync_loop.run_until_complete(self._client.close())
                self._client = self._client_loop = None
            self._sync_loop.close()

    async def __aenter__(self) -> RulerJudge:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __enter__(self) -> RulerJudge:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _run_sync(self, coroutine: Any) -> Any:
        if self._sync_loop is None or self._sync_loop.is_closed():
            self._sync_loop = asyncio.new_event_loop()
        return self._sync_loop.run_until_complete(coroutine)

    def score_group_sync(self, trajectories: Sequence[Sequence[Message]]) -> JudgeResult:
        """:meth:`score_group` for synchronous callers, on an event loop the
        judge keeps between calls (so the HTTP connection is reused); call
        :meth:`close` (or use ``with judge:``) when done. Not from inside a
        running loop, nor from two threads at once."""
        return self._run_sync(self.score_group(trajectories))

    async def score_groups(
        self, groups: Sequence[Sequence[Sequence[Message]]], max_concurrency: int = 8
    ) -> list[JudgeResult]:
        """Score several groups (e.g. one step's) with at most ``max_concurrency``
        calls in flight; results in the order of ``groups``.

        Raises:
            ValueError: ``max_concurrency`` < 1, or a malformed group (checked
                before any call is made).
        """
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        for group in groups:
            validate_trajectories(group)
        gate = asyncio.Semaphore(max_concurrency)

        async def one(group: Sequence[Sequence[Message]]) -> JudgeResult:
            async with gate:
                return await self.score_group(group)

        return list(await asyncio.gather(*(one(g) for g in groups)))

    def score_groups_sync(
        self, groups: Sequence[Sequence[Sequence[Message]]], max_concurrency: int = 8
    ) -> list[JudgeResult]:
        """:meth:`score_groups` for synchronous callers (see :meth:`score_group_sync`)."""
        return self._run_sync(self.score_groups(groups, max_concurrency))

    def _request(self, trajectories: Sequence[Sequence[Message]]) -> dict[str, Any]:
        group_size = len(trajectories)
        request: dict[str, Any] = {
            "model": self.model,
            "messages": build_judge_messages(
                trajectories, self.rubric, answer_in_prompt=not self.use_response_format
            ),
            "max_tokens": answer_token_budget(group_size),
        }
        if self.use_response_format:
            request["response_format"] = response_format(group_size)
        return request

    def _cost(self, prompt_tokens: int, completion_tokens: int) -> float | None:
        if self.model not in self.prices:
            return None
        per_input, per_output = self.prices[self.model]
        return (prompt_tokens * per_input + completion_tokens * per_output) / 1e6

    def _from_cache(self, key: str) -> JudgeResult | None:
        entry = self.cache.get(key) if self.cache is not None else None
        if entry is None:
            return None
        return JudgeResult(
            scores=entry["scores"],
            explanations=entry["explanations"],
            error=None,
            raw=entry["raw"],
            model=self.model,
            request_hash=key,
            cached=True,
            scale=entry["scale"],
        )

    async def score_group(self, trajectories: Sequence[Sequence[Message]]) -> JudgeResult:
        """Score one group; never raises for judge or network failures.

        Args:
            trajectories: G trajectories, each a list of OpenAI-style message
                dicts (``{"role": ..., "content": ...}``); typically the same
                system/user messages followed by different assistant replies.

        Returns:
            A :class:`JudgeResult`; on failure after the last retry,
            ``scores`` is None and ``error`` says why (status ``failed``).

        Raises:
            ValueError: malformed input (see :func:`validate_trajectories`).
        """
        validate_trajectories(trajectories)
        started = time.perf_counter()
        tally = _Tally()
        result = await self._until_done(self._client_here(), trajectories, tally)
        if result is None:
            result = JudgeResult(
                scores=None,
                explanations=[],
                error=f"judge failed after {tally.http.attempts} attempt(s): {tally.http.errors[-1]}",
                raw=tally.raw,
                model=self.model,
                request_hash=tally.key,
            )
        result.attempts = tally.http.attempts
        result.latency_s = time.perf_counter() - started
        result.prompt_tokens = tally.prompt_tokens
        result.completion_tokens = tally.completion_tokens
        result.cost_usd = self._cost(tally.prompt_tokens, tally.completion_tokens)
        result.attempt_errors = tally.http.errors
        result.response_mode = tally.mode
        return result

    async def _until_done(
        self, client: openai.AsyncOpenAI, trajectories: Sequence[Sequence[Message]], tally: _Tally
    ) -> JudgeResult | None:
        """Attempts until an answer, a cache hit, an error the openai client
        gave up on, or the last re-ask; None means failed (reasons in ``tally``).

        The openai client retries HTTP errors, time-outs and failed
        connections; this loop only re-asks, ``reasks`` times, for an
        answer it cannot read.
        """
        reasks = 0
        while True:
            request = self._request(trajectories)
            # the server is part of the answer: another server's (or model's) cached verdict is not this one's
            tally.key = request_hash({**request, "rubric": self.rubric, "base_url": self.base_url})
            tally.mode = "json_schema" if "response_format" in request else "prompt"
            if (hit := self._from_cache(tally.key)) is not None:
                tally.mode = "cache"
                return hit
            try:
                return await self._attempt(client, request, len(trajectories), tally)
            except openai.APIStatusError as exc:
                if self.use_response_format and _refuses_response_format(exc):
                    self.use_response_format = False
                    # JudgeHttpClient logged the refusal itself
                    tally.http.errors[-1] += " (re-sent asking for JSON in the prompt)"
                    continue
                return None  # permanent, or the client's retries ran out (each response logged)
            except openai.APIConnectionError:  # time-outs too: the client's retries ran out (each logged)
                return None
            except JudgeAnswerError as exc:
                tally.http.errors.append(str(exc))
            reasks += 1
            if reasks > self.reasks:
                return None

    async def _attempt(
        self, client: openai.AsyncOpenAI, request: dict[str, Any], group_size: int, tally: _Tally
    ) -> JudgeResult:
        """One request (with the client's retries); raises openai errors
        or :class:`JudgeAnswerError`."""
        with tally.http.watching():
            response = await client.chat.completions.create(**request)
        if response.usage is not None:
            tally.prompt_tokens += response.usage.prompt_tokens or 0
            tally.completion_tokens += response.usage.completion_tokens or 0
        tally.raw = (response.choices[0].message.content or "") if response.choices else ""
        ids = [str(k) for k in range(1, group_size + 1)]
        scores, explanations, scale = parse_answer(tally.raw, ids)
        if self.cache is not None:
            entry = {"scores": scores, "explanations": explanations, "raw": tally.raw,
                     "scale": scale, "model": self.model}
            self.cache.put(tally.key, entry)
        return JudgeResult(
            scores=scores,
            explanations=explanations,
            error=None,
            raw=tally.raw,
            model=self.model,
            request_hash=tally.key,
            scale=scale,
        )
