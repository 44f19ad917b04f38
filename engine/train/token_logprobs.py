"""Log-probabilities of chosen tokens without a float32 copy of the whole logits tensor.

The update needs, per completion token, log p(y_t) = z_t[y_t] / T -
logsumexp(z_t / T) for logits z_t of a vocabulary of V (49,152 for SmolLM2)
at temperature T. Written as tensor expressions, autograd keeps a float32
copy of every (token, V) logit row for the backward pass (twice, under bf16
autocast: the cast and the scaled copy), which is most of an update's peak
memory. :func:`chosen_logprobs` computes the same values and gradients in
chunks of tokens: the forward keeps only the logits as the model returned
them (bf16 under autocast) and the logsumexp per token; the backward
recomputes each chunk's softmax, d log p(y) / dz = (onehot(y) - softmax(z))
/ T, as a fused cross-entropy does. Peak extra memory is one float32 chunk of
:data:`CHUNK_BYTES`, whatever the batch.
"""

from __future__ import annotations

from typing import Any

import torch

#: Bytes of one float32 chunk of logits rows the log-probs are computed in.
CHUNK_BYTES = 32 * 2**20


def _chunks(tokens: int, vocab: int) -> list[slice]:
    size = max(1, CHUNK_BYTES // (vocab * 4))
    return [slice(start, min(start + size, tokens)) for start in range(0, tokens, size)]


class _ChosenLogprobs(torch.autograd.Function):
    """Forward: (log p of the chosen ids, logsumexp), both float32 (N,); backward: the logits' gradient."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, ids: torch.Tensor, temperature: float) -> tuple[torch.Tensor, ...]:
        logp = torch.empty(ids.shape, dtype=torch.float32, device=logits.device)
        lse = torch.empty_like(logp)
        for part in _chunks(logits.shape[0], logits.shape[1]):
            scaled = logits[part].float() / temperature
            lse[part] = torch.logsumexp(scaled, dim=-1)
            logp[part] = scaled.gather(-1, ids[part].unsqueeze(-1)).squeeze(-1) - lse[part]
        ctx.save_for_backward(logits, ids, lse)
        ctx.temperature = temperature
        return logp, lse

    @staticmethod
    def backward(ctx: Any, grad_logp: torch.Tensor, grad_lse: torch.Tensor | None) -> tuple[Any, ...]:
        logits, ids, lse = ctx.saved_tensors
        grad = torch.empty_like(logits)
        for part in _chunks(logits.shape[0], logits.shape[1]):
            probs = torch.exp(logits[part].float() / ctx.temperature - lse[part].unsqueeze(-1))
            # d logp / dz = (onehot(y) - p) / T; d lse / dz = p / T
            weight = -grad_logp[part] + (grad_lse[part] if grad_lse is not None else 0.0)
            chunk = probs * weight.unsqueeze(-1)
            chunk.scatter_add_(-1, ids[part].unsqueeze(-1), grad_logp[part].unsqueeze(-1))
            grad[part] = (chunk / ctx.temperature).to(logits.dtype)
        return grad, None, None


def chosen_logprobs(logits: torch.Tensor, ids: torch.Tensor, temperature: float = 1.0
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities (float32, ``ids``' shape) of ``ids`` under ``logits / temperature``,
    and the logsumexp of the scaled logits (the same shape; for the entropy).

    Args:
        logits: (..., V) in any float dtype (bf16 under autocast); kept as is
            for the backward pass, never copied whole to float32.
        ids: (...) long, the chosen tokens, same leading shape.
        temperature: the sampling temperature (> 0).

    Gradients flow to ``logits`` through both outputs.
    """
    shape = ids.shape
    logp, lse = _ChosenLogprobs.apply(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1), float(temperature))
    return logp.reshape(shape), lse.reshape(shape)


@torch.no_grad()
def token_entropy(logits: torch.Tensor, lse: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Entropy (nats, float32, the leading shape) of softmax(logits / temperature) per
    position, H = lse - sum softmax(z) z, in chunks (no graph, no whole float32 copy)."""
    flat, flat_lse = logits.reshape(-1, logits.shape[-1]), lse.reshape(-1)
    out = torch.empty(flat.shape[0], dtype=torch.float32, device=logits.device)
    for part in _chunks(flat.shape[0], flat.shape[1]):
        scaled = flat[part].float() / temperature
        probs = torch.exp(scaled - flat_lse[part].unsqueeze(-1))
        out[part] = flat_lse[part] - (probs * scaled).sum(-1)
    return out.reshape(lse.shape)
