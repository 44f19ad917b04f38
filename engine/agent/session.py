"""One step's rollouts behind the endpoint: each request checked, sampled, answered and recorded.

A :class:`RolloutSession` opens a :class:`RolloutRecord` per rollout key.
A request for a key is checked (the run's model name, the token budget, the
request limit, its fields), rendered through the policy's chat template,
sampled by the continuous batcher, and answered as the ``openai`` package's
own ``ChatCompletion``. The record keeps each completion as it was sampled:
the prompt's token ids, the sampled ids and their log-probs, and the reply
(its text, and its calls parsed from the Hermes ``<tool_call>`` blocks of
``engine.tools.calls``, which the template's or the convention's tool prompt
asks for). What the agent sends back is never re-tokenized into them.

A refused request is an HTTP error the agent sees (OpenAI's error body), and
a named problem on its record: the rollout becomes an error trajectory
(``engine.agent.trajectory``).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from openai.types.chat import ChatCompletion, ChatCompletionMessage, ChatCompletionTokenLogprob
from openai.types.chat.chat_completion import Choice, ChoiceLogprobs
from openai.types.chat.chat_completion_message_function_tool_call import ChatCompletionMessageFunctionToolCall, Function
from openai.types.completion_usage import CompletionUsage
from pydantic import ValidationError

from rlab.engine.agent.request import ChatRequest, chat_messages
from rlab.engine.policy.continuous import BatcherStats, GenerationRequest
from rlab.engine.tools.calls import ParsedCall, assistant_message, parse_turn
from rlab.engine.types import Message, Sample, Sampler, ToolCall
from rlab.engine.validation import located, one_line

#: Requests one rollout may make per assistant turn the task allows (an agent's retries).
REQUESTS_PER_TURN = 4


class Batcher(Protocol):
    """Where a session's requests are sampled: the engine's continuous batcher
    (``engine.policy.continuous``) or a vLLM server's (``engine.agent.forwarding``)."""

    stats: BatcherStats

    def refuses(self, request: GenerationRequest) -> str | None: ...

    def submit(self, request: GenerationRequest) -> Future[list[Sample]]: ...

    def close(self) -> None: ...


class EndpointError(Exception):
    """A request the endpoint refuses: its HTTP status, OpenAI's error ``code`` and the message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass
class RecordedTurn:
    """One sampled completion of a rollout, as it was sampled.

    messages: the request's conversation (chat_messages'). tools: the tools its
    prompt showed. prompt_ids: that prompt's tokens. sample: the sampled tokens,
    their log-probs (nats, the sampling distribution's) and text. reply: the
    assistant message returned. calls: the calls parsed from the text.
    temperature: what it was sampled at.
    """

    messages: list[Message]
    tools: list[dict[str, Any]] | None
    prompt_ids: list[int]
    sample: Sample
    reply: Message
    calls: list[ParsedCall]
    temperature: float


@dataclass
class RolloutRecord:
    """Everything the endpoint saw of one rollout: its completions and its refused requests.

    problems: ``(kind, message)`` per refused request; kinds: ``wrong_model``,
    ``over_budget``, ``too_many_requests``, ``invalid_request``, ``stream_unsupported``, ``unsupported``.
    """

    key: str
    turns: list[RecordedTurn] = field(default_factory=list)
    requests: int = 0
    problems: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class SessionLimits:
    """What one rollout may ask for.

    model: the model name requests must name. max_new_tokens: tokens at most per
    completion (the run's budget). max_requests: requests at most per rollout.
    temperature: the run's temperature, for requests that give none.
    greedy: held-out evaluation: every request is sampled greedily.
    """

    model: str
    max_new_tokens: int
    max_requests: int
    temperature: float
    greedy: bool = False


class RolloutSession:
    """The open rollouts of one step, served through one continuous batcher."""

    def __init__(self, sampler: Sampler, tokenizer: Any, batcher: Batcher, limits: SessionLimits,
                 keys: list[str]) -> None:
        self.sampler, self.tokenizer, self.batcher, self.limits = sampler, tokenizer, batcher, limits
        self.records = {key: RolloutRecord(key) for key in keys}
        self.opened = time.monotonic()
        self._lock = threading.Lock()

    async def complete(self, key: str, body: Any) -> ChatCompletion:
        """Answer one request of rollout ``key``.

        Raises:
            EndpointError: no such open rollout (404), too many requests (429),
                a request the run cannot honour (400, 404 for another model);
                all but the first are also recorded as the rollout's problems.
        """
        record = self.records.get(key)
        if record is None:
            raise EndpointError(404, "rollout_not_found", f"no open rollout {key!r}: use the client (base URL) "
                                "the rollout was given, while it runs")
        with self._lock:
            record.requests += 1
            count = record.requests
        if count > self.limits.max_requests:
            raise self._refuse(record, 429, "too_many_requests",
                               f"this rollout made {count} requests; a rollout may make {self.limits.max_requests}")
        request = self._parse(record, body)
        messages, tools = self._conversation(record, request)
        prompt_ids = self.sampler.render(messages, tools)
        budget = request.max_completion_tokens or request.max_tokens or self.limits.max_new_tokens
        temperature = 0.0 if self.limits.greedy else (
            self.limits.temperature if request.temperature is None else request.temperature)
        generation = GenerationRequest(prompt_ids, request.n, budget, temperature, request.top_p or 1.0,
                                       request.stops(), request.seed)
        if (refused := self.batcher.refuses(generation)) is not None:
            raise self._refuse(record, 400, "unsupported", refused)
        samples = await asyncio.wrap_future(self.batcher.submit(generation))
        turns = [self._turn(record, messages, tools, prompt_ids, s, temperature) for s in samples]
        return _completion(request, turns, self.tokenizer if request.logprobs else None)

    def _parse(self, record: RolloutRecord, body: Any) -> ChatRequest:
        try:
            request = ChatRequest.model_validate(body)
        except ValidationError as err:
            raise self._refuse(record, 400, "invalid_request", one_line(err, located, most=3)) from None
        if request.stream:
            raise self._refuse(record, 400, "stream_unsupported", "stream=true is not served; call without stream")
        if request.model != self.limits.model:
            raise self._refuse(record, 404, "model_not_found",
                               f"model {request.model!r} is not served here; ask for {self.limits.model!r} "
                               "(the model name the rollout was given)")
        asked = request.max_completion_tokens or request.max_tokens
        if asked is not None and asked > self.limits.max_new_tokens:
            raise self._refuse(record, 400, "over_budget",
                               f"max_tokens {asked} is over the run's budget of {self.limits.max_new_tokens} "
                               "tokens a turn (--max-new-tokens); ask for at most that")
        return request

    def _conversation(self, record: RolloutRecord, request: ChatRequest) -> tuple[list[Message], Any]:
        try:
            return chat_messages(request.messages), request.offered_tools()
        except ValueError as err:
            raise self._refuse(record, 400, "invalid_request", str(err)) from None

    def _refuse(self, record: RolloutRecord, status: int, code: str, message: str) -> EndpointError:
        with self._lock:
            record.problems.append((code, message))
        return EndpointError(status, code, message)

    def _turn(self, record: RolloutRecord, messages: list[Message], tools: Any, prompt_ids: list[int],
              sample: Sample, temperature: float) -> RecordedTurn:
        parsed = parse_turn(sample.text) if tools else None
        content = parsed.content if parsed else sample.text
        with self._lock:
            index = len(record.turns)
            named = [c for c in parsed.calls if c.name and c.problem is None] if parsed else []
            reply = assistant_message(content, [ToolCall(f"call_{index}_{k}", c.name, c.arguments)
                                                for k, c in enumerate(named)])
            turn = RecordedTurn(messages, tools, prompt_ids, sample, reply, parsed.calls if parsed else [], temperature)
            record.turns.append(turn)
        return turn


def _completion(request: ChatRequest, turns: list[RecordedTurn], tokenizer: Any) -> ChatCompletion:
    """The turns as OpenAI's ``ChatCompletion`` (one choice each), with each sampled token's
    text and log-prob when a ``tokenizer`` is given (the request asked for ``logprobs``)."""
    choices = []
    for i, turn in enumerate(turns):
        calls = [ChatCompletionMessageFunctionToolCall(id=c["id"], type="function", function=Function(**c["function"]))
                 for c in turn.reply.get("tool_calls", [])]
        finish = "tool_calls" if calls else ("length" if turn.sample.truncated else "stop")
        choices.append(Choice(
            index=i, finish_reason=finish,
            message=ChatCompletionMessage(role="assistant", content=turn.reply["content"], tool_calls=calls or None),
            logprobs=None if tokenizer is None else ChoiceLogprobs(content=[
                ChatCompletionTokenLogprob(token=tokenizer.decode([t]), logprob=lp, bytes=None, top_logprobs=[])
                for t, lp in zip(turn.sample.token_ids, turn.sample.logprobs)])))
    prompt = len(turns[0].prompt_ids)
    completion = sum(len(t.sample.token_ids) for t in turns)
    return ChatCompletion(id=f"chatcmpl-{uuid.uuid4().hex}", object="chat.completion", created=int(time.time()),
                          model=request.model, choices=choices,
                          usage=CompletionUsage(prompt_tokens=prompt, completion_tokens=completion,
                                                total_tokens=prompt + completion))
