"""engine/train/token_logprobs.py: the chunked log-probs equal the plain expression, values and gradients."""

from __future__ import annotations

import pytest
import torch

from rlab.engine.train import token_logprobs
from rlab.engine.train.token_logprobs import chosen_logprobs


def _plain(logits: torch.Tensor, ids: torch.Tensor, temperature: float):
    scaled = logits.float() / temperature
    logp = torch.log_softmax(scaled, dim=-1)
    return logp.gather(-1, ids.unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)


@pytest.mark.parametrize("dtype, temperature", [(torch.float32, 1.0), (torch.float32, 0.7), (torch.bfloat16, 0.8)])
def test_values_and_gradients_match_the_plain_expression_across_chunks(monkeypatch, dtype, temperature):
    monkeypatch.setattr(token_logprobs, "CHUNK_BYTES", 7 * 50 * 4)  # 7 tokens a chunk: 3 chunks and a rest
    torch.manual_seed(0)
    base = torch.randn(3, 8, 50) * 3
    ids = torch.randint(0, 50, (3, 8))
    weights = torch.randn(3, 8)
    grads = []
    for compute in (_plain, chosen_logprobs):
        logits = base.to(dtype).requires_grad_(True)
        logp, entropy = compute(logits, ids, temperature)
        (logp * weights).sum().backward()
        grads.append((logp.detach(), entropy.detach(), logits.grad.float()))
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    for plain, chunked in zip(grads[0], grads[1]):
        assert torch.allclose(plain, chunked, atol=tol, rtol=tol)


def test_the_entropy_carries_no_gradient_and_the_logits_are_left_as_they_were():
    torch.manual_seed(1)
    logits = torch.randn(2, 9, 30, requires_grad=True)
    before = logits.detach().clone()
    logp, entropy = chosen_logprobs(logits, torch.randint(0, 30, (2, 9)), 0.9)
    assert not entropy.requires_grad and logp.requires_grad
    logp.sum().backward()
    assert torch.equal(logits.detach(), before)  # the chunks are worked in place, never in the logits
