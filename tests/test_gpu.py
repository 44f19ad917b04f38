"""CUDA checks of LoRA training, bf16 autocast, peak memory and resume (skipped without a GPU)."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from rlab.engine.policy.device import bf16_supported, peak_memory_metric, training_options
from rlab.engine.policy.lora import LoraSettings, apply_lora, reference_mode
from rlab.engine.train.checkpoint import load_checkpoint, save_checkpoint
from rlab.engine.policy.model import Policy
from rlab.engine.policy.tiny import build_config, build_tokenizer

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def qwen2_lora(device: str = "cuda"):
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return apply_lora(Qwen2ForCausalLM(config), LoraSettings(rank=8, alpha=16)).to(device)


def lm_loss(model, ids: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=ids).logits[:, :-1].float()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def ids_on(device: str) -> torch.Tensor:
    return torch.randint(3, 128, (4, 16), generator=torch.Generator().manual_seed(1)).to(device)


def test_bf16_autocast_with_checkpointing_trains_only_the_adapter():
    model = qwen2_lora()
    autocast = training_options(model, "cuda", gradient_checkpointing=True)
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    with autocast():
        out = model(input_ids=ids_on("cuda")).logits
        loss = lm_loss(model, ids_on("cuda"))
    assert out.dtype == (torch.bfloat16 if bf16_supported("cuda") else torch.float32)
    loss.backward()
    optimizer.step()
    assert all(torch.equal(p, frozen[n]) for n, p in model.named_parameters() if n in frozen)
    assert torch.isfinite(loss)


def test_reference_mode_on_gpu_matches_the_base_model_after_training():
    model = qwen2_lora()
    model.eval()
    with torch.no_grad():
        base = model(input_ids=ids_on("cuda")).logits
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    lm_loss(model, ids_on("cuda")).backward()
    optimizer.step()
    model.eval()
    with torch.no_grad(), reference_mode(model):
        assert torch.allclose(model(input_ids=ids_on("cuda")).logits, base, atol=1e-5)


def test_peak_memory_metric_reports_then_resets():
    """Measured against what is allocated when the test starts: earlier tests' tensors
    (a cached model, say) may still hold memory, and the metric counts them too."""
    torch.cuda.synchronize()
    held = torch.cuda.memory_allocated() / 1e9
    peak_memory_metric("cuda")
    block = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")  # 268 MB
    first = peak_memory_metric("cuda")["gpu/peak_allocated_gb"]
    del block
    second = peak_memory_metric("cuda")["gpu/peak_allocated_gb"]
    assert first - held >= 0.268 > second - held


def test_checkpoint_written_on_cpu_resumes_on_gpu(tmp_path):
    model = qwen2_lora("cpu")
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    model.train()
    lm_loss(model, ids_on("cpu")).backward()
    optimizer.step()
    save_checkpoint(tmp_path / "ck", model, optimizer, step=5)

    gpu_model = qwen2_lora("cuda")
    gpu_opt = torch.optim.AdamW([p for p in gpu_model.parameters() if p.requires_grad], lr=1e-2)
    assert load_checkpoint(tmp_path / "ck", gpu_model, gpu_opt).step == 5
    assert all(s["exp_avg"].is_cuda for s in gpu_opt.state.values())
    model.eval()
    gpu_model.eval()
    with torch.no_grad():
        cpu_logits = model(input_ids=ids_on("cpu")).logits
        gpu_logits = gpu_model(input_ids=ids_on("cuda")).logits.cpu()
    assert torch.allclose(cpu_logits, gpu_logits, atol=1e-4)


def test_gpu_checkpoint_restores_the_cuda_rng(tmp_path):
    model = qwen2_lora()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    save_checkpoint(tmp_path / "ck", model, optimizer, step=1)
    expected = torch.rand(4, device="cuda")
    load_checkpoint(tmp_path / "ck", model, optimizer)
    assert torch.equal(torch.rand(4, device="cuda"), expected)


def test_tiny_policy_samples_on_cuda():
    tokenizer = build_tokenizer()
    torch.manual_seed(0)
    policy = Policy(LlamaForCausalLM(build_config(len(tokenizer))), tokenizer, "cuda")
    prompts = [policy.render([{"role": "user", "content": "2+2="}])] * 8
    samples = policy.sample(prompts, max_new_tokens=6, temperature=1.0)
    assert len(samples) == 8 and all(len(s.token_ids) == len(s.logprobs) <= 6 for s in samples)
