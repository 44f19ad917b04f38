"""VLLMBackend against a real HTTP server on 127.0.0.1 that answers like vLLM."""

from __future__ import annotations

import json
import socket

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from rlab.engine.policy.lora import LoraSettings, apply_lora
from rlab.engine.train.trainer import Trainer, TrainConfig
from rlab.engine.types import TrainSample
from rlab.engine.policy.vllm import VLLMBackend, VLLMError
from vllm_server import Failure, VLLMServer


def lora_model(rank: int = 4):
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return apply_lora(Qwen2ForCausalLM(config), LoraSettings(rank=rank, alpha=2 * rank))


@pytest.fixture
def server():
    with VLLMServer(reverse_choices=True) as srv:
        yield srv


def backend_for(srv: VLLMServer, **kwargs) -> VLLMBackend:
    kwargs.setdefault("max_retries", 0)
    return VLLMBackend(srv.base_url, srv.base_model, timeout_s=5, **kwargs)


def test_sample_returns_the_servers_tokens_and_logprobs_in_prompt_order(server):
    prompts = [[5, 6, 7], [8, 9], [10]]
    samples = backend_for(server).sample(prompts, max_new_tokens=4, temperature=0.7)

    path, body = server.requests[-1]
    assert path == "/v1/completions"
    assert body["prompt"] == prompts and body["n"] == 1 and body["max_tokens"] == 4
    assert body["temperature"] == 0.7 and body["logprobs"] == 1 and body["return_tokens_as_token_ids"] is True
    assert (body["top_p"], body["top_k"], body["repetition_penalty"]) == (1.0, -1, 1.0)
    answered = server.completions[-1]  # in index order; the server sent them reversed
    for sample, choice in zip(samples, answered):
        assert sample.token_ids == [int(t.split(":")[1]) for t in choice["logprobs"]["tokens"]]
        assert sample.logprobs == choice["logprobs"]["token_logprobs"]
        assert sample.text == choice["text"]
        assert sample.truncated == (choice["finish_reason"] == "length")
        assert sample.truncated == (server.eos_id not in sample.token_ids)
        assert len(sample.token_ids) <= 4


def test_truncated_and_stopped_completions_both_occur():
    with VLLMServer() as srv:
        samples = backend_for(srv).sample([[i + 3] for i in range(40)], max_new_tokens=2)
    assert {s.truncated for s in samples} == {True, False}
    assert all(s.token_ids[-1] == 2 for s in samples if not s.truncated)


def test_base_model_is_found_from_the_models_list(server):
    backend = VLLMBackend(server.base_url, timeout_s=5)
    assert backend.current_model == server.base_model
    assert ("/v1/models", None) in server.requests


def test_sync_policy_loads_each_step_and_later_rollouts_use_it(server, tmp_path):
    model = lora_model()
    backend = backend_for(server)
    backend.sample([[5]], max_new_tokens=2)
    assert backend.sync_policy(model, 1, tmp_path) == "rlab-step-1"
    backend.sample([[5]], max_new_tokens=2)
    assert backend.sync_policy(model, 2, tmp_path) == "rlab-step-2"
    backend.sample([[5]], max_new_tokens=2)

    assert server.model_requests() == [server.base_model, "rlab-step-1", "rlab-step-2"]
    loads = [body for path, body in server.requests if path == "/v1/load_lora_adapter"]
    assert loads == [{"lora_name": f"rlab-step-{i}", "lora_path": str((tmp_path / f"step-{i}").resolve())}
                     for i in (1, 2)]
    # The old adapter is unloaded and its files removed: server memory and disk stay bounded.
    assert list(server.adapters) == ["rlab-step-2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-2"]
    assert json.loads((tmp_path / "step-2" / "adapter_config.json").read_text())["r"] == 4


def test_one_rl_step_through_the_backend_trains_on_the_servers_logprobs(server, tmp_path):
    model = lora_model()
    backend = backend_for(server)
    prompts = [[5, 6], [7, 8]]
    samples = backend.sample(prompts, max_new_tokens=3)
    batch = [TrainSample(p, s.token_ids, s.logprobs, adv) for p, s, adv in zip(prompts, samples, (1.0, -1.0))]
    metrics = Trainer(model, pad_id=0, config=TrainConfig(lr=1e-2)).step(batch)
    assert metrics["trained_samples"] == 2 and metrics["loss"] == metrics["loss"]  # finite, not NaN
    backend.sync_policy(model, 1, tmp_path)
    backend.sample(prompts, max_new_tokens=3)
    assert server.model_requests()[-1] == "rlab-step-1"


def test_a_failed_sync_keeps_the_previous_adapter(server, tmp_path):
    model = lora_model()
    backend = backend_for(server)
    backend.sync_policy(model, 1, tmp_path)
    server.fail_next("/v1/load_lora_adapter", Failure(500, "out of memory"))
    with pytest.raises(VLLMError, match="HTTP 500.*out of memory"):
        backend.sync_policy(model, 2, tmp_path)
    backend.sample([[5]], max_new_tokens=2)
    assert server.model_requests() == ["rlab-step-1"]
    assert (tmp_path / "step-1" / "adapter_config.json").is_file()


def test_a_restarted_server_gets_the_current_adapter_again(server, tmp_path):
    backend = backend_for(server)
    backend.sync_policy(lora_model(), 4, tmp_path)
    server.adapters.clear()  # what a restart of `vllm serve` does to runtime-loaded adapters
    assert len(backend.sample([[5], [6]], max_new_tokens=2)) == 2
    assert server.model_requests() == ["rlab-step-4", "rlab-step-4"]  # refused, then answered
    assert server.adapters == {"rlab-step-4": str((tmp_path / "step-4").resolve())}


def test_runtime_lora_off_is_a_clear_error_and_keeps_the_base_model(tmp_path):
    with VLLMServer(runtime_lora=False) as srv:
        backend = backend_for(srv)
        with pytest.raises(VLLMError, match="VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"):
            backend.sync_policy(lora_model(), 1, tmp_path)
        assert backend.current_model == srv.base_model


def test_adapter_rank_above_the_servers_limit_names_the_flag(tmp_path):
    with VLLMServer(max_lora_rank=2) as srv:
        with pytest.raises(VLLMError, match="max_lora_rank 2.*--max-lora-rank"):
            backend_for(srv).sync_policy(lora_model(rank=4), 1, tmp_path)


def test_missing_adapter_path_is_a_clear_error(server, tmp_path):
    with pytest.raises(VLLMError, match="No adapter found.*must exist on the server"):
        backend_for(server).load_adapter("x", tmp_path / "nothing-here")


def test_a_name_left_loaded_by_a_previous_run_is_reloaded(server, tmp_path):
    model = lora_model()
    backend_for(server).sync_policy(model, 3, tmp_path / "first")
    restarted = backend_for(server)
    assert restarted.sync_policy(model, 3, tmp_path / "second") == "rlab-step-3"
    assert server.adapters["rlab-step-3"] == str((tmp_path / "second" / "step-3").resolve())


def test_sync_policy_needs_lora(server, tmp_path):
    plain = Qwen2ForCausalLM(Qwen2Config(vocab_size=16, hidden_size=8, intermediate_size=16,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
    with pytest.raises(VLLMError, match="--lora-rank"):
        backend_for(server).sync_policy(plain, 1, tmp_path)


def test_server_errors_are_retried_then_reported(server):
    server.fail_next("/v1/completions", Failure(500), times=2)
    samples = backend_for(server, max_retries=2).sample([[5]], max_new_tokens=2)
    assert len(samples) == 1 and len(server.model_requests()) == 3

    server.fail_next("/v1/completions", Failure(503, "engine dead"), times=2)
    with pytest.raises(VLLMError, match="HTTP 503.*engine dead"):
        backend_for(server, max_retries=1).sample([[5]], max_new_tokens=2)


@pytest.mark.parametrize(
    "raw, match",
    [
        (b"{not json", "not JSON"),
        (b'{"choices": 3}', "malformed"),
        (b'{"choices": []}', "0 choices for 1 prompts"),
        (b'{"choices": [{"index": 0, "text": "x", "finish_reason": "stop"}]}',
         "without token log-probabilities"),
        (b'{"choices": [{"index": 0, "text": "x", "finish_reason": "stop", '
         b'"logprobs": {"tokens": ["x"], "token_logprobs": [-1.0]}}]}', "ignored return_tokens_as_token_ids"),
        (b'{"choices": [{"index": 0, "text": "x", "finish_reason": "stop", '
         b'"logprobs": {"tokens": ["token_id:4"], "token_logprobs": []}}]}', "different lengths"),
    ],
)
def test_malformed_answers_are_clear_errors(server, raw, match):
    server.fail_next("/v1/completions", Failure(200, raw=raw))
    with pytest.raises(VLLMError, match=match):
        backend_for(server).sample([[5]], max_new_tokens=2)


def test_unknown_model_name_says_how_to_find_the_served_one(server):
    with pytest.raises(VLLMError, match="does not exist.*served-model-name"):
        VLLMBackend(server.base_url, "wrong-name", max_retries=0).sample([[5]], max_new_tokens=2)


def test_unreachable_server_is_a_clear_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        backend = VLLMBackend(f"http://127.0.0.1:{port}/v1", "m", timeout_s=2, max_retries=0)
        with pytest.raises(VLLMError, match="cannot reach the vLLM server.*--vllm-url"):
            backend.sample([[5]], max_new_tokens=2)


def test_bad_arguments_and_render(server):
    backend = backend_for(server)
    with pytest.raises(ValueError, match="empty prompt"):
        backend.sample([[5], []], max_new_tokens=2)
    with pytest.raises(ValueError, match="max_new_tokens"):
        backend.sample([[5]], max_new_tokens=0)
    with pytest.raises(TypeError, match="render=policy.render"):
        backend.render([{"role": "user", "content": "hi"}])
    rendering = backend_for(server, render=lambda msgs, tools: [len(m["content"]) for m in msgs])
    assert rendering.render([{"role": "user", "content": "hi"}]) == [2]
