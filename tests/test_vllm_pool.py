"""Several rollout servers (engine.policy.vllm_pool) against loopback fakes, dead servers included."""

from __future__ import annotations

import pytest

from rlab.engine.run.config import RunConfig
from rlab.engine.policy.vllm import ServerDown, VLLMBackend, VLLMError
from rlab.engine.policy.vllm_pool import VLLMPool, deal, group_spans, split_urls
from rlab.store.reader import StoreReader
from test_vllm_backend import lora_model
from vllm_server import Failure, VLLMServer


@pytest.fixture
def two():
    with VLLMServer() as a, VLLMServer() as b:
        yield a, b


def pool_of(*servers: VLLMServer, **kwargs) -> VLLMPool:
    return VLLMPool([VLLMBackend(s.base_url, s.base_model, timeout_s=5, max_retries=0) for s in servers], **kwargs)


def prompts_of(groups: int, size: int) -> list[list[int]]:
    return [[10 + g, 20 + g] for g in range(groups) for _ in range(size)]


def test_split_urls():
    assert split_urls(" http://a/v1, http://b/v1,") == ["http://a/v1", "http://b/v1"]
    with pytest.raises(ValueError, match="names no server"):
        split_urls(" , ")
    with pytest.raises(ValueError, match="names a server twice"):
        split_urls("http://a/v1,http://a/v1")


def test_groups_are_runs_of_equal_prompts_dealt_in_contiguous_shares():
    spans = group_spans([[1], [1], [2], [2], [3], [1]])
    assert spans == [(0, 2), (2, 4), (4, 5), (5, 6)]
    assert deal(spans, 3) == [(0, 4), (4, 5), (5, 6)]
    assert deal(spans[:1], 3) == [(0, 2)]  # fewer groups than servers: some get none


def test_groups_are_spread_over_servers_and_answers_keep_prompt_order(two):
    a, b = two
    samples = pool_of(a, b).sample(prompts_of(3, 2), max_new_tokens=3)
    assert len(samples) == 6
    sent_a = [body["prompt"] for path, body in a.requests if path == "/v1/completions"]
    sent_b = [body["prompt"] for path, body in b.requests if path == "/v1/completions"]
    assert sent_a == [prompts_of(3, 2)[:4]] and sent_b == [prompts_of(3, 2)[4:]]  # whole groups per server
    answered = a.completions[0] + b.completions[0]
    assert [s.token_ids for s in samples] == [[int(t[9:]) for t in c["logprobs"]["tokens"]] for c in answered]


def test_every_server_gets_every_adapter(two, tmp_path):
    a, b = two
    pool = pool_of(a, b)
    model = lora_model()
    assert pool.sync_policy(model, 1, tmp_path) == "rlab-step-1"
    assert pool.sync_policy(model, 2, tmp_path) == "rlab-step-2"
    pool.sample(prompts_of(2, 2), max_new_tokens=2)
    for server in (a, b):
        assert list(server.adapters) == ["rlab-step-2"]
        assert server.model_requests() == ["rlab-step-2"]
    assert [p.name for p in tmp_path.iterdir()] == ["step-2"]


def test_a_dead_server_is_dropped_and_its_groups_go_to_the_others(tmp_path):
    drops = []
    with VLLMServer() as a:
        with VLLMServer() as b:
            pool = pool_of(a, b, on_drop=lambda url, why: drops.append((url, why)))
            pool.sync_policy(lora_model(), 1, tmp_path)
            dead = b.base_url
        samples = pool.sample(prompts_of(4, 2), max_new_tokens=2)  # b is gone now
        assert len(samples) == 8
        assert [u for u, _ in drops] == [dead] and "cannot reach" in drops[0][1]
        assert [x.base_url for x in pool.backends] == [a.base_url]
        assert a.completions[-1] and len(a.completions[-1]) == 8  # a answered every group in the end
        pool.sync_policy(lora_model(), 2, tmp_path)
        assert list(a.adapters) == ["rlab-step-2"] and len(drops) == 1


def test_a_server_failing_with_5xx_while_syncing_is_dropped(two, tmp_path):
    a, b = two
    pool = pool_of(a, b)
    b.fail_next("/v1/load_lora_adapter", Failure(503, "engine dead"))
    pool.sync_policy(lora_model(), 1, tmp_path)
    assert pool.dropped == [(b.base_url, pool.dropped[0][1])] and "HTTP 503" in pool.dropped[0][1]
    assert list(a.adapters) == ["rlab-step-1"]


def test_the_last_server_is_never_dropped(tmp_path):
    with VLLMServer() as a:
        pool = pool_of(a)
    with pytest.raises(ServerDown, match="cannot reach"):
        pool.sample(prompts_of(1, 2), max_new_tokens=2)
    assert len(pool.backends) == 1 and pool.dropped == []


def test_a_refusal_is_an_error_not_a_dead_server(two):
    a, b = two
    b.fail_next("/v1/completions", Failure(400, "bad request"))
    with pytest.raises(VLLMError, match="HTTP 400.*bad request"):
        pool_of(a, b).sample(prompts_of(2, 2), max_new_tokens=2)


def test_a_run_goes_on_when_one_of_two_servers_dies(two, raw_tiny_model_dir, tmp_path):
    from rlab.engine.step import run

    a, b = two
    b.fail_next("/v1/completions", Failure(503, "engine dead"), times=100)
    db = tmp_path / "r.db"
    summary = run(RunConfig(model=raw_tiny_model_dir, backend="vllm", vllm_url=f"{a.base_url},{b.base_url}",
                            lora_rank=4, max_steps=2, prompts_per_step=2, group_size=2, eval_size=2, db=db))
    assert summary["status"] == "finished" and summary["steps"] == 2
    with StoreReader(db) as reader:
        events = [e for e in reader.events(summary["run_id"]) if e["kind"] == "server_dropped"]
    assert len(events) == 1
    payload = events[0]["payload"]
    assert payload["url"] == b.base_url and payload["servers_left"] == 1 and "HTTP 503" in payload["reason"]
    assert list(a.adapters) == ["rlab-step-2"]
