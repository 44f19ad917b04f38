"""LoRA, training options and checkpoints on small models built locally (CPU)."""

from __future__ import annotations

import json
import random

import pytest
import torch
from pydantic import ValidationError
from transformers import LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from rlab.engine.policy.device import peak_memory_metric, training_options
from rlab.engine.policy.lora import LoraError, LoraSettings, apply_lora, is_lora, reference_mode, save_adapter
from rlab.engine.train.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from rlab.engine.policy.tiny import build_config, build_tokenizer
from rlab.engine.train.trainer import Trainer, TrainConfig
from rlab.engine.types import TrainSample

SETTINGS = LoraSettings(rank=4, alpha=8)


def qwen2(seed: int = 0) -> Qwen2ForCausalLM:
    """A Qwen2-architecture causal LM with tiny sizes and random weights."""
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )
    return Qwen2ForCausalLM(config).eval()


def tiny_llama(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    return LlamaForCausalLM(build_config(len(build_tokenizer())))


def batch(vocab: int = 64, seed: int = 1) -> torch.Tensor:
    return torch.randint(3, vocab, (3, 12), generator=torch.Generator().manual_seed(seed))


def lm_loss(model, ids: torch.Tensor) -> torch.Tensor:
    logits = model(input_ids=ids).logits[:, :-1]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))


def train(model, ids: torch.Tensor, steps: int = 3, lr: float = 1e-2) -> torch.optim.Optimizer:
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    for _ in range(steps):
        optimizer.zero_grad()
        lm_loss(model, ids).backward()
        optimizer.step()
    model.eval()
    return optimizer


def logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_settings_reject_bad_values():
    with pytest.raises(ValidationError, match="rank"):
        LoraSettings(rank=0)
    with pytest.raises(ValidationError, match="empty name"):
        LoraSettings(target_modules=["q_proj", " "])
    assert LoraSettings().target_modules == ["q_proj", "k_proj", "v_proj", "o_proj"]
    alphas = (LoraSettings().alpha, LoraSettings(rank=8).alpha, LoraSettings(rank=8, alpha=4).alpha)
    assert alphas == (32, 16, 4)  # 2 x rank unless given


def test_unknown_target_module_names_the_real_layers():
    with pytest.raises(LoraError, match=r"\['query'\].*q_proj"):
        apply_lora(qwen2(), LoraSettings(target_modules=["q_proj", "query"]))


def test_lora_trains_only_adapter_and_reference_is_the_base_model():
    base_logits = logits(qwen2(), batch())
    model = apply_lora(qwen2(), SETTINGS)
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    adapter = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    assert adapter and all("lora_" in n for n in adapter)
    assert torch.equal(logits(model, batch()), base_logits)  # B = 0 at init

    train(model, batch())

    assert all(torch.equal(p, frozen[n]) for n, p in model.named_parameters() if n in frozen)
    assert any(not torch.equal(p, adapter[n]) for n, p in model.named_parameters() if n in adapter)
    assert not torch.allclose(logits(model, batch()), base_logits, atol=1e-4)
    with reference_mode(model):
        assert torch.allclose(logits(model, batch()), base_logits, atol=1e-6)
    assert not torch.allclose(logits(model, batch()), base_logits, atol=1e-4)  # adapter back on after


def test_trainer_step_on_a_lora_model_moves_only_the_adapter():
    model = apply_lora(qwen2(), SETTINGS)
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    trainer = Trainer(model, pad_id=0, config=TrainConfig(lr=1e-2, beta=0.0))
    sample = TrainSample(prompt_ids=[5, 6, 7], completion_ids=[8, 9], old_logprobs=[-4.0, -4.0],
                         advantage=1.0)
    metrics = trainer.step([sample, TrainSample([5, 6], [10], [-4.0], -1.0)])
    assert metrics["trained_samples"] == 2 and metrics["grad_norm"] > 0
    assert all(torch.equal(p, frozen[n]) for n, p in model.named_parameters() if n in frozen)


def test_reference_mode_and_save_adapter_refuse_a_plain_model(tmp_path):
    with pytest.raises(TypeError, match="frozen copy"):
        with reference_mode(qwen2()):
            pass
    with pytest.raises(TypeError, match="save_pretrained"):
        save_adapter(qwen2(), tmp_path)


def test_save_adapter_writes_only_the_adapter(tmp_path):
    model = apply_lora(qwen2(), SETTINGS)
    save_adapter(model, tmp_path / "a")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["README.md", "adapter_config.json",
                                                                  "adapter_model.safetensors"]
    config = json.loads((tmp_path / "a" / "adapter_config.json").read_text())
    assert (config["r"], config["lora_alpha"], sorted(config["target_modules"])) == (
        4, 8, ["k_proj", "o_proj", "q_proj", "v_proj"])


def test_training_options_on_cpu_give_no_autocast_and_same_gradients_with_checkpointing():
    ids = batch(vocab=100)
    grads, layer_calls = [], []
    for checkpointing in (False, True):
        model = tiny_llama()
        autocast = training_options(model, "cpu", gradient_checkpointing=checkpointing)
        calls = []
        model.model.layers[0].self_attn.q_proj.register_forward_hook(lambda *_: calls.append(1))
        model.train()
        with autocast():
            out = model(input_ids=ids).logits
        assert out.dtype == torch.float32
        lm_loss(model, ids).backward()
        grads.append(model.model.layers[0].self_attn.q_proj.weight.grad.clone())
        layer_calls.append(len(calls))
    # Checkpointing recomputes each layer's forward in the backward pass.
    assert layer_calls == [2, 3]
    assert torch.allclose(grads[0], grads[1], atol=1e-6)


def test_training_options_refuse_bf16_where_unsupported(monkeypatch):
    from rlab.engine.policy import device

    monkeypatch.setattr(device, "_cpu_flags", lambda: {"avx2"})  # a CPU without native bf16
    with pytest.raises(ValueError, match="--no-bf16"):
        training_options(qwen2(), "cpu", bf16=True)
    monkeypatch.setattr(device, "_cpu_flags", lambda: {"avx512_bf16"})
    with training_options(qwen2(), "cpu", bf16=True)():
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16 and torch.is_autocast_enabled("cpu")


def test_a_run_computes_in_bf16_by_default_only_for_a_large_model_on_a_cpu_with_native_bf16(monkeypatch):
    from rlab.engine.policy import device

    small, large = torch.nn.Linear(4, 4), torch.nn.Linear(8000, 8000, device="meta")  # 20 parameters, 64 M
    monkeypatch.setattr(device, "_cpu_flags", lambda: {"avx512_bf16"})
    assert [device.uses_bf16(m, "cpu", None) for m in (small, large)] == [False, True]
    assert device.uses_bf16(large, "cpu", False) is False and device.uses_bf16(small, "cpu", True) is True
    monkeypatch.setattr(device, "_cpu_flags", lambda: {"avx2"})
    assert device.uses_bf16(large, "cpu", None) is False


def test_peak_memory_metric_is_empty_on_cpu():
    assert peak_memory_metric("cpu") == {}


def test_full_model_checkpoint_round_trip(tmp_path):
    ids = batch(vocab=100)
    model = tiny_llama()
    optimizer = train(model, ids, steps=2)
    random.seed(7)
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    save_checkpoint(tmp_path / "ck", model, optimizer, step=12, rng_state=random.Random(3).getstate())
    expected_draw = (torch.rand(3), random.random())
    assert (tmp_path / "ck" / "model" / "config.json").is_file()

    fresh = tiny_llama(seed=99)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    resumed = load_checkpoint(tmp_path / "ck", fresh, fresh_opt)

    assert resumed.step == 12
    assert resumed.rng_state == random.Random(3).getstate()
    assert all(torch.equal(v, saved[k]) for k, v in fresh.state_dict().items())
    assert _adam_moments(fresh_opt) == pytest.approx(_adam_moments(optimizer))
    assert torch.equal(torch.rand(3), expected_draw[0]) and random.random() == expected_draw[1]


def test_lora_checkpoint_round_trip_resumes_training_identically(tmp_path):
    ids = batch()
    model = apply_lora(qwen2(), SETTINGS)
    optimizer = train(model, ids, steps=2)
    save_checkpoint(tmp_path / "ck", model, optimizer, step=2)
    assert not (tmp_path / "ck" / "model").exists()
    fresh = apply_lora(qwen2(), SETTINGS)
    fresh_opt = torch.optim.AdamW([p for p in fresh.parameters() if p.requires_grad], lr=1e-2)
    assert load_checkpoint(tmp_path / "ck", fresh, fresh_opt).step == 2
    assert torch.allclose(logits(fresh, ids), logits(model, ids), atol=1e-6)

    # Two further steps on each copy must agree: the Adam moments came back too.
    for m, opt in ((model, optimizer), (fresh, fresh_opt)):
        m.train()
        for _ in range(2):
            opt.zero_grad()
            lm_loss(m, ids).backward()
            opt.step()
    assert torch.allclose(logits(fresh, ids), logits(model, ids), atol=1e-5)


def test_checkpoint_kind_mismatch_and_missing_files_are_clear_errors(tmp_path):
    lora = apply_lora(qwen2(), SETTINGS)
    save_checkpoint(tmp_path / "lora", lora, train(lora, batch(), steps=1), step=1)
    plain = qwen2()
    with pytest.raises(CheckpointError, match="resume with LoRA on"):
        load_checkpoint(tmp_path / "lora", plain, torch.optim.AdamW(plain.parameters()))
    for other in (LoraSettings(rank=4, target_modules=["q_proj"]), LoraSettings(rank=8)):
        model = apply_lora(qwen2(), other)
        with pytest.raises(CheckpointError, match="does not fit the model.*--lora-rank"):
            load_checkpoint(tmp_path / "lora", model, torch.optim.AdamW(model.parameters()))
    same = apply_lora(qwen2(), SETTINGS)  # optimizer over all parameters, saved over the adapter's only
    with pytest.raises(CheckpointError, match="optimizer state .* does not fit"):
        load_checkpoint(tmp_path / "lora", same, torch.optim.AdamW(same.parameters()))
    with pytest.raises(CheckpointError, match="optimizer.pt is missing"):
        load_checkpoint(tmp_path / "nowhere", plain, torch.optim.AdamW(plain.parameters()))
    assert is_lora(lora) and not is_lora(plain)


def _adam_moments(optimizer: torch.optim.Optimizer) -> list[float]:
    return [float(s["exp_avg"].abs().sum() + s["exp_avg_sq"].abs().sum()) for s in optimizer.state.values()]


CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def chatml_model_dir(path):
    """A local model directory shaped like Qwen2.5-Instruct: Qwen2 weights, a byte-level
    BPE tokenizer (trained here on a few sentences), ChatML template, <|im_end|> as EOS.

    transformers loads its tokenizer as ``Qwen2Tokenizer`` (from config.json's
    model type), as it does for a real Qwen directory.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    core.train_from_iterator(["system user assistant Be brief. What is 2+2? The answer is 4.\n"] * 5, trainer)
    tok = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tok.chat_template = CHATML
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_a_chat_model_directory_trains_with_lora_and_resumes(tmp_path):
    """--model PATH end to end on CPU: chat-template prompt, sample, LoRA update, checkpoint, resume."""
    from rlab.engine.policy.model import Policy

    policy = Policy.load(chatml_model_dir(tmp_path / "model"), device="cpu")
    prompt = policy.render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}])
    tok = policy.tokenizer
    assert tok.decode(prompt) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert prompt.count(tok.convert_tokens_to_ids("<|im_start|>")) == 3  # specials are single tokens

    policy.model = apply_lora(policy.model, SETTINGS)
    samples = policy.sample([prompt] * 4, max_new_tokens=6, temperature=1.0)
    trainer = Trainer(policy.model, policy.pad_id, TrainConfig(lr=1e-2, beta=0.1))
    batch = [TrainSample(prompt, s.token_ids, s.logprobs, a) for s, a in zip(samples, (1.0, -1.0, 0.5, -0.5))]
    metrics = trainer.step(batch)
    assert metrics["trained_samples"] == 4 and metrics["loss"] == metrics["loss"]
    save_checkpoint(tmp_path / "ck", policy.model, trainer.optimizer, step=1)

    again = Policy.load(tmp_path / "model", device="cpu")
    again.model = apply_lora(again.model, SETTINGS)
    optimizer = Trainer(again.model, again.pad_id, TrainConfig(lr=1e-2, beta=0.1)).optimizer
    assert load_checkpoint(tmp_path / "ck", again.model, optimizer).step == 1
    ids = torch.tensor([prompt])
    assert torch.allclose(logits(again.model, ids), logits(policy.model, ids), atol=1e-6)


def test_the_tiny_policy_trains_on_one_cpu_thread_unless_told(monkeypatch):
    """One thread for the tiny policy (a second only contends with the TUI); a real model one per
    core but one (issue 59: on a loaded 2-core machine a thread per core stalled its eval)."""
    import os

    from rlab.engine.policy.device import set_cpu_threads

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
        set_cpu_threads(None, tiny_policy=False)
        assert torch.get_num_threads() == 7
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
        set_cpu_threads(None, tiny_policy=False)
        assert torch.get_num_threads() == 1
        set_cpu_threads(None, tiny_policy=True)
        assert torch.get_num_threads() == 1
        set_cpu_threads(2, tiny_policy=True)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
