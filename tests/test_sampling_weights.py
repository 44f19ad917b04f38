"""Sampling through a merged LoRA copy (engine.policy.sampling_weights, issue 39): the
sampled tokens' log-probs are the trained model's to float tolerance, before and after
an update, and the copy shares every weight the adapter does not touch."""

from __future__ import annotations

import torch

from rlab.engine.policy.lora import LoraSettings, apply_lora
from rlab.engine.policy.model import Policy
from rlab.engine.policy.tiny import embedded_dir
from rlab.engine.train.microbatch import collate
from rlab.engine.train.trainer import TrainConfig, Trainer
from rlab.engine.types import TrainSample

PROMPTS = [[{"role": "user", "content": f"{a}+{b}="}] for a, b in ((12, 34), (56, 7), (81, 19), (40, 40))]


def _policy() -> Policy:
    torch.manual_seed(0)
    policy = Policy.load(embedded_dir("arithmetic"), "cpu")
    policy.model = apply_lora(policy.model, LoraSettings(rank=4))
    for name, param in policy.model.named_parameters():
        if "lora_B" in name:  # an adapter that has trained: B is no longer zero
            param.data.normal_(0, 0.05)
    return policy


def _sampled_and_recomputed(policy: Policy, trainer: Trainer) -> tuple[torch.Tensor, torch.Tensor]:
    prompts = [policy.render(p) for p in PROMPTS for _ in range(4)]
    samples = policy.sample(prompts, max_new_tokens=6, temperature=0.7)
    train = [TrainSample(p, s.token_ids, s.logprobs, advantage=1.0) for p, s in zip(prompts, samples)]
    batch = collate(train, policy.pad_id, "cpu")
    with torch.no_grad():
        recomputed, _ = trainer._token_logprobs(policy.model, batch, with_entropy=False)
    return batch.old_logprobs[batch.completion_mask.bool()], recomputed[batch.completion_mask.bool()]


def test_the_merged_copy_samples_the_trained_policys_distribution_before_and_after_an_update():
    policy = _policy()
    trainer = Trainer(policy.model, policy.pad_id, TrainConfig(lr=1e-2, temperature=0.7))
    sampled, recomputed = _sampled_and_recomputed(policy, trainer)
    assert torch.allclose(sampled, recomputed, atol=1e-4), (sampled - recomputed).abs().max()
    first = policy.sampling_model()
    prompts = [policy.render(p) for p in PROMPTS]
    samples = policy.sample(prompts, max_new_tokens=6, temperature=0.7)
    trainer.step([TrainSample(p, s.token_ids, s.logprobs, advantage=a)
                  for p, s, a in zip(prompts, samples, (1.0, -1.0, 0.5, -0.5))])
    assert policy.sampling_model() is not first  # the update moved the adapter: the copy is rebuilt
    sampled, recomputed = _sampled_and_recomputed(policy, trainer)
    assert torch.allclose(sampled, recomputed, atol=1e-4), (sampled - recomputed).abs().max()


def test_the_merged_copy_shares_the_weights_the_adapter_does_not_touch():
    policy = _policy()
    copy = policy.sampling_model()
    base = policy.model.get_base_model()
    assert copy.model.layers[0].mlp.up_proj.weight.data_ptr() == base.model.layers[0].mlp.up_proj.weight.data_ptr()
    assert copy.model.layers[0].self_attn.q_proj.weight.data_ptr() != \
        base.model.layers[0].self_attn.q_proj.base_layer.weight.data_ptr()
    assert not any("lora" in name for name, _ in copy.named_parameters())
    assert policy.sampling_model() is copy  # no write since: no rebuild
