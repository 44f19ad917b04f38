"""The agent endpoint (engine.agent.endpoint, session) through the real openai client, on the tiny model."""

from __future__ import annotations

import asyncio
import socket

import httpx2
import openai
import pytest
import torch
from openai.types.chat import ChatCompletion

from rlab.engine.agent.endpoint import Endpoint
from rlab.engine.agent.session import RolloutSession, SessionLimits
from rlab.engine.policy.continuous import ContinuousBatcher
from rlab.engine.policy.model import Policy

MODEL = "rlab-policy"
MESSAGES = [{"role": "user", "content": "12+7="}]


@pytest.fixture(scope="module")
def policy(raw_tiny_model_dir):
    return Policy.load(raw_tiny_model_dir, "cpu")


@pytest.fixture(scope="module")
def endpoint():
    served = Endpoint(MODEL)
    served.start()
    yield served
    served.close()


@pytest.fixture
def session(policy, endpoint):
    batcher = ContinuousBatcher(policy.model, policy.tokenizer, pad_id=policy.pad_id, eos_id=policy.eos_id,
                                device="cpu")
    opened = endpoint.session = RolloutSession(policy, policy.tokenizer, batcher, SessionLimits(MODEL, 12, 3, 1.0),
                                               ["a", "b", "c", "d"])
    yield opened
    endpoint.session = None
    batcher.close()


def _client(endpoint, key="a", api_key=None):
    return openai.AsyncOpenAI(base_url=endpoint.base_url(key), api_key=api_key or endpoint.key, max_retries=0)


async def test_a_completion_is_the_openai_type_and_its_tokens_are_recorded_as_sampled(endpoint, session, policy):
    client = _client(endpoint)
    models = await client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    reply = await client.chat.completions.create(model=MODEL, messages=MESSAGES, n=2, logprobs=True,
                                                 max_tokens=8, temperature=0.7)
    raw = await client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES, max_tokens=4)
    ChatCompletion.model_validate_json(raw.text)  # the body itself is OpenAI's type, not only what the client reads
    turns = session.records["a"].turns
    assert len(turns) == 3 and len(reply.choices) == 2
    for choice, turn in zip(reply.choices, turns):
        assert turn.prompt_ids == policy.render(MESSAGES)
        assert [t.logprob for t in choice.logprobs.content] == turn.sample.logprobs
        assert len(turn.sample.token_ids) <= 8
        assert choice.message.content == turn.reply["content"]
        # the stored log-probs are the sampling distribution's (temperature 0.7), token by token
        ids = torch.tensor([turn.prompt_ids + turn.sample.token_ids])
        logits = policy.model(input_ids=ids).logits[0, len(turn.prompt_ids) - 1:-1] / 0.7
        expected = torch.log_softmax(logits, -1).gather(1, torch.tensor(turn.sample.token_ids)[:, None]).squeeze(1)
        assert turn.sample.logprobs == pytest.approx(expected.tolist(), abs=1e-4)
    assert reply.usage.completion_tokens == sum(len(t.sample.token_ids) for t in turns[:2])


async def test_concurrent_requests_decode_together_and_a_seed_repeats(endpoint, session):
    clients = [_client(endpoint, key) for key in "abcd"]
    replies = await asyncio.gather(*(c.chat.completions.create(model=MODEL, messages=MESSAGES, seed=5, max_tokens=12)
                                     for c in clients))
    assert len({r.choices[0].message.content for r in replies}) == 1  # one seed, one draw, whatever the batch
    assert session.batcher.stats.row_steps / max(session.batcher.stats.decode_steps, 1) > 1.5


async def test_requests_the_run_cannot_honour_are_refused_and_recorded(endpoint, session):
    client = _client(endpoint, "b")
    with pytest.raises(openai.NotFoundError, match="ask for 'rlab-policy'"):
        await client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    with pytest.raises(openai.BadRequestError, match="over the run's budget of 12"):
        await client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=500)
    with pytest.raises(openai.BadRequestError, match="stream"):
        await client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
    with pytest.raises(openai.RateLimitError, match="a rollout may make 3"):
        await client.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert [kind for kind, _ in session.records["b"].problems] == [
        "model_not_found", "over_budget", "stream_unsupported", "too_many_requests"]
    with pytest.raises(openai.NotFoundError, match="no open rollout 'zz'"):
        await _client(endpoint, "zz").chat.completions.create(model=MODEL, messages=MESSAGES)
    with pytest.raises(openai.BadRequestError, match="role"):
        await _client(endpoint, "c").chat.completions.create(model=MODEL, messages=[{"role": "robot", "content": "x"}])


async def test_a_request_without_the_runs_key_is_401_and_nothing_listens_beyond_loopback(endpoint, session):
    for headers in ({"Authorization": "Bearer wrong"}, {}):
        response = httpx2.post(endpoint.base_url("a") + "/chat/completions", json={"model": MODEL, "messages": MESSAGES},
                               headers=headers)
        assert response.status_code == 401 and response.json()["error"]["code"] == "invalid_api_key"
    assert not session.records["a"].turns and not session.records["a"].requests
    assert {s.getsockname()[0] for s in endpoint._server.servers[0].sockets} == {"127.0.0.1"}
    other = _non_loopback_address()
    if other is None:
        pytest.skip("this host has no address beyond loopback to try")
    with pytest.raises(OSError):
        socket.create_connection((other, endpoint.port), timeout=2).close()


def _non_loopback_address() -> str | None:
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("10.255.255.255", 1))  # no packet is sent: this only picks the outward interface
        address = probe.getsockname()[0]
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address
