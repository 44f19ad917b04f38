"""The supervised loop's loss (engine.train.sft): the shared-prefix, chunked batch trains the
same loss as the plain padded batch, for the tiny policy and under a LoRA adapter."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from transformers import LlamaForCausalLM

from rlab.engine.policy.lora import LoraSettings, apply_lora
from rlab.engine.policy.model import Policy
from rlab.engine.policy.tiny import build_config, build_tokenizer, context_tokens
from rlab.engine.train.sft import SftPair, sft_backward, transcript_pairs
from rlab.engine.train.warm_start import tool_schemas
from rlab.scenarios import load_scenario

ROOT = Path(__file__).resolve().parents[1]


def _plain_loss(model: torch.nn.Module, pairs: list[SftPair], pad_id: int) -> torch.Tensor:
    """The loss as written down: every row whole, padded to the longest, one forward pass."""
    rows = [list(p.context + p.completion) for p in pairs]
    width = max(len(r) for r in rows)
    ids = torch.tensor([r + [pad_id] * (width - len(r)) for r in rows])
    mask = torch.zeros(len(rows), width)
    for k, p in enumerate(pairs):
        mask[k, len(p.context):len(p.context) + len(p.completion)] = 1.0
    logits = model(input_ids=ids).logits[:, :-1]
    nll = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                                            reduction="none").view_as(mask[:, 1:])
    return (nll * mask[:, 1:]).sum() / mask[:, 1:].sum()


@pytest.fixture(scope="module")
def shop():
    """The shop agent's warm-start pairs through a fresh tiny tool policy (a batch's contexts
    share the system prompt and the tools line)."""
    task = load_scenario(None, ROOT / "examples" / "tasks" / "shop_agent")
    torch.manual_seed(0)
    tokenizer = build_tokenizer(tools=True)
    policy = Policy(LlamaForCausalLM(build_config(len(tokenizer), context_tokens(task))), tokenizer, "cpu")
    pairs = transcript_pairs(policy, task.sft_transcripts(0), task.system_prompt, tool_schemas(task))
    return policy, pairs


def _train_a_little(model: torch.nn.Module, pairs: list[SftPair], pad_id: int) -> None:
    """Move the weights off their initial values (a trained model's activations differ more)."""
    weights = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(weights, lr=3e-3)
    for k in range(3):
        optimizer.zero_grad()
        _plain_loss(model, pairs[16 * k:16 * k + 16], pad_id).backward()
        optimizer.step()


def _same_loss_and_gradients(model: torch.nn.Module, batch: list[SftPair], pad_id: int) -> None:
    trainable = [p for p in model.parameters() if p.requires_grad]
    model.zero_grad()
    fast = sft_backward(model, batch, pad_id)
    fast_grads = [p.grad.clone() for p in trainable]
    model.zero_grad()
    plain = _plain_loss(model, batch, pad_id)
    plain.backward()
    assert abs(fast - plain.item()) < 1e-4
    # the prefix's keys and values carry their gradients back to every weight
    for a, p in zip(fast_grads, trainable):
        assert torch.allclose(a, p.grad, atol=1e-5, rtol=1e-3)


def test_the_shared_prefix_loss_is_the_plain_loss_at_equal_weights(shop):
    policy, pairs = shop
    _train_a_little(policy.model, pairs, policy.pad_id)
    batch = random.Random(1).sample(pairs, 64)
    assert len({p.context[:40] for p in batch}) == 1  # the shared part the fast loss reads once
    _same_loss_and_gradients(policy.model, batch, policy.pad_id)


def test_the_shared_prefix_loss_under_a_lora_adapter(shop):
    policy, pairs = shop
    model = apply_lora(LlamaForCausalLM(policy.model.config), LoraSettings(rank=4))
    _train_a_little(model, pairs, policy.pad_id)
    _same_loss_and_gradients(model, random.Random(2).sample(pairs, 40), policy.pad_id)


def test_rows_with_nothing_in_common_take_the_plain_path(shop):
    policy, _ = shop
    pairs = [SftPair((5, 6, 7), (8, policy.eos_id)), SftPair((9, 6), (7, 8, 9, policy.eos_id))]
    _same_loss_and_gradients(policy.model, pairs, policy.pad_id)
