"""Log-probabilities and entropies of chosen tokens without a float32 copy of the whole logits tensor.

The update needs, per completion token, log p(y_t) = z_t[y_t] / T -
logsumexp(z_t / T) for logits z_t of a vocabulary of V (49,152 for SmolLM2)
at temperature T, and for the metrics the entropy of softmax(z_t / T).
Written as tensor expressions, autograd keeps a float32 copy of every
(token, V) logit row for the backward pass (twice, under bf16 autocast: the
cast and the scaled copy), which is most of an update's peak memory.
:func:`chosen_logprobs` computes the same values and gradients in chunks of
tokens: the forward keeps only the logits as the model returned them (bf16
under autocast) and the logsumexp per token; the backward recomputes each
chunk's softmax, d log p(y) / dz = (onehot(y) - softmax(z)) / T, as a fused
cross-entropy does. Peak extra memory is one or two float32 chunks of
:data:`CHUNK_BYTES`, whatever the batch. Each chunk is worked in place: on a
CPU every pass over a (tokens, V) chunk, and every fresh chunk-sized buffer,
costs about as much as the arithmetic (profiled: the log-probs and the
entropy were 7 % of a SmolLM2 update in float32 when each step of the
formula made its own tensor).
"""

from __future__ import annotations

from typing import Any

import torch

#: Bytes of one float32 chunk of logits rows the log-probs are computed in.
CHUNK_BYTES = 32 * 2**20


def _chunks(tokens: int, vocab: int) -> list[slice]:
    size = max(1, CHUNK_BYTES // (vocab * 4))
    return [slice(start, min(start + size, tokens)) for start in range(0, tokens, size)]


def _scaled(rows: torch.Tensor, temperature: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """``rows / temperature`` in float32, written into ``out`` (float32, ``rows``' shape) or a
    fresh tensor; never into ``rows``."""
    if out is None:
        out = torch.empty(rows.shape, dtype=torch.float32, device=rows.device)
    if rows.dtype == torch.float32:
        return torch.div(rows, temperature, out=out)
    return out.copy_(rows).div_(temperature)


class _ChosenLogprobs(torch.autograd.Function):
    """Forward: (log p of the chosen ids, entropy), both float32 (N,), the entropy without a
    gradient; backward: the logits' gradient."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, ids: torch.Tensor, temperature: float) -> tuple[torch.Tensor, ...]:
        logp = torch.empty(ids.shape, dtype=torch.float32, device=logits.device)
        lse, entropy = torch.empty_like(logp), torch.empty_like(logp)
        for part in _chunks(logits.shape[0], logits.shape[1]):
            shifted = _scaled(logits[part], temperature)
            top = shifted.amax(-1)
            chosen = shifted.gather(-1, ids[part].unsqueeze(-1)).squeeze(-1)
            shifted.sub_(top.unsqueeze(-1))  # s - max: exp cannot overflow
            weights = shifted.exp()
            total = weights.sum(-1)
            log_total = total.log()
            lse[part] = top + log_total
            # H = lse - sum p s = log(total) - sum e (s - max) / total, with e = exp(s - max)
            entropy[part] = log_total - weights.mul_(shifted).sum(-1) / total
            logp[part] = chosen - lse[part]
        ctx.save_for_backward(logits, ids, lse)
        ctx.temperature = temperature
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx: Any, grad_logp: torch.Tensor, _grad_entropy: torch.Tensor | None) -> tuple[Any, ...]:
        logits, ids, lse = ctx.saved_tensors
        grad = torch.empty_like(logits)
        # d logp / dz = (onehot(y) - p) / T
        scale = grad_logp / ctx.temperature
        in_place = grad.dtype == torch.float32
        for part in _chunks(logits.shape[0], logits.shape[1]):
            chunk = _scaled(logits[part], ctx.temperature, out=grad[part] if in_place else None)
            chunk.sub_(lse[part].unsqueeze(-1)).exp_().mul_(-scale[part].unsqueeze(-1))
            chunk.scatter_add_(-1, ids[part].unsqueeze(-1), scale[part].unsqueeze(-1))
            if not in_place:
                grad[part] = chunk
        return grad, None, None


def chosen_logprobs(logits: torch.Tensor, ids: torch.Tensor, temperature: float = 1.0
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities (float32, ``ids``' shape) of ``ids`` under ``logits / temperature``,
    and the entropy of softmax(logits / temperature) at each position (nats, float32, the
    same shape, no gradient).

    Args:
        logits: (..., V) in any float dtype (bf16 under autocast); kept as is
            for the backward pass, never copied whole to float32.
        ids: (...) long, the chosen tokens, same leading shape.
        temperature: the sampling temperature (> 0).

    Gradients flow to ``logits`` through the log-probabilities.
    """
    shape = ids.shape
    logp, entropy = _ChosenLogprobs.apply(logits.reshape(-1, logits.shape[-1]), ids.reshape(-1), float(temperature))
    return logp.reshape(shape), entropy.reshape(shape)
