"""Sampling through ``transformers``' own ``generate`` with a static KV cache.

The policy's own loop (``engine.policy.sampling``) shares each prompt's
prefill among its G rows and drops finished rows, which is what a CPU and a
small batch want. On a GPU, decoding a small model is bound by kernel
launches instead: ``generate`` with ``cache_implementation="static"``
preallocates the cache so every decoding step has the same shapes, and
``transformers`` compiles that step (CUDA graphs) on CUDA. ``--generation
hf_static`` selects this path for single-turn rollouts; which one is faster
on a given card is measured by ``tests/bench/gpu_check.sh`` (docs/gpu.md),
not assumed. Multi-turn episodes keep the loop (its prefix cache).
"""

from __future__ import annotations

import torch
from transformers import GenerationConfig

from rlab.engine.policy.kv import left_pad
from rlab.engine.policy.sampling import Sampled


@torch.no_grad()
def sample_static(model, prompt_ids: list[list[int]], *, max_new_tokens: int, temperature: float,
                  pad_id: int, eos_id: int, device) -> Sampled:
    """One completion per prompt through ``model.generate`` with a static cache (greedy when
    ``temperature`` <= 0); the same :class:`~rlab.engine.policy.sampling.Sampled` as the loop.

    Sampling is plain: softmax(logits / temperature), no top-k, top-p or
    penalties, whatever the model's own ``generation_config`` says, so the
    log-probabilities (nats, of the sampling distribution; temperature 1 for
    greedy) are those the update's ratio divides by. Tokens after EOS are
    dropped (EOS itself is kept).
    """
    model.eval()
    ids, mask = left_pad(prompt_ids, pad_id, device)
    greedy = temperature <= 0
    config = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=not greedy,
                              temperature=1.0 if greedy else temperature, top_k=0, top_p=1.0,
                              pad_token_id=pad_id, eos_token_id=eos_id, cache_implementation="static",
                              return_dict_in_generate=True, output_scores=True)
    out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
    new = out.sequences[:, ids.shape[1]:]
    scores = torch.stack(out.scores, dim=1).float()  # (B, T, V): the logits after temperature
    logprobs = torch.log_softmax(scores, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
    tokens, chosen = [], []
    for row, row_logprobs in zip(new.tolist(), logprobs.tolist()):
        end = row.index(eos_id) + 1 if eos_id in row else len(row)
        tokens.append(row[:end])
        chosen.append(row_logprobs[:end])
    return Sampled(tokens, chosen)
