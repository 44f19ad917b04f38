"""The KV cache plumbing the sampler and the update share: one term, the shared prefix.

- the *shared prefix* of a batch's prompts (a task's system prompt and chat
  template) runs through the model once and its keys and values serve every
  prompt (:func:`shared_prefix_length`, :func:`shared_prefix_kv`): the
  sampler's prefill (``engine.policy.sampling``) and the update's forward
  passes (``engine.train.trainer``) apply the same rule;
- a multi-turn episode's previous turn is the prefix of its next one, kept
  between sampler calls in a :class:`PrefixCache`;
- how a cache is handed to a model (:func:`with_cache`) and how prompts are
  padded into one batch (:func:`left_pad`).
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass, field
from typing import Any, cast

import torch
from transformers import DynamicCache

#: Bytes of kept KV at most per :class:`PrefixCache` (rows past it are prefilled again
#: next turn). SmolLM2-135M keeps 46 KB per token (30 layers x K,V x 3 heads x 64 x 4
#: bytes), so 1 GiB holds 64 episodes of 360 tokens.
PREFIX_CACHE_BUDGET_BYTES = 2**30

#: One layer's kept keys and values for one row: two (heads, tokens, head_dim) tensors.
LayerKV = tuple[torch.Tensor, torch.Tensor]

#: A shared prefix of at least this many tokens among a call's distinct prompts is
#: prefilled once (:func:`shared_prefix_kv`); shorter, one more forward pass costs more
#: than it saves.
MIN_SHARED_PREFIX_TOKENS = 8


@dataclass
class PrefixCache:
    """The KV cache of the previous :func:`sample` call's rows, for the next call to extend.

    One per batch of episodes (``engine.rollout.episodes.run_groups``) and
    dropped with it, so the weights cannot change under a kept row. Each
    call replaces what the previous one kept.

    Attributes:
        budget_bytes: KV bytes kept at most.
        reused_tokens: prompt tokens served from kept KV, over all calls.
        prefilled_tokens: prompt tokens run through the model, over all calls.
    """

    budget_bytes: int = PREFIX_CACHE_BUDGET_BYTES
    reused_tokens: int = 0
    prefilled_tokens: int = 0
    _rows: dict[tuple[int, ...], list[LayerKV]] = field(default_factory=dict)
    _bytes: int = 0

    def longest_prefix(self, prompt: list[int]) -> tuple[int, list[LayerKV] | None]:
        """(n, kv): the longest kept row that is a proper prefix of ``prompt``
        (at least one prompt token is left to run, for the next logits); (0, None) if none."""
        for n in sorted({len(key) for key in self._rows}, reverse=True):
            if n < len(prompt) and (kv := self._rows.get(tuple(prompt[:n]))) is not None:
                return n, kv
        return 0, None

    def replace(self) -> None:
        """Forget every kept row (the start of a call that will keep its own)."""
        self._rows, self._bytes = {}, 0

    def keep(self, tokens: list[int], kv: list[LayerKV]) -> None:
        """Keep ``kv``, the cache of exactly ``tokens``; over the budget, the rows kept
        first make room (the endpoint's cache lives a whole step, so the newest turns,
        which the next requests extend, win). A row bigger than the budget is not kept."""
        size = _size(kv)
        if size > self.budget_bytes:
            return
        while self._bytes + size > self.budget_bytes:
            self._bytes -= _size(self._rows.pop(next(iter(self._rows))))
        self._bytes += size - (_size(old) if (old := self._rows.pop(tuple(tokens), None)) is not None else 0)
        self._rows[tuple(tokens)] = kv


def _size(kv: list[LayerKV]) -> int:
    return sum(k.numel() * k.element_size() * 2 for k, _ in kv)


def left_pad(prompt_ids: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad prompts to one width: ids (B, L) long and attention mask (B, L) long."""
    width = max(len(p) for p in prompt_ids)
    ids = torch.full((len(prompt_ids), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompt_ids), width), dtype=torch.long)
    for row, prompt in enumerate(prompt_ids):
        ids[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
        mask[row, width - len(prompt):] = 1
    return ids.to(device), mask.to(device)


def with_cache(model, kv: DynamicCache) -> dict[str, DynamicCache]:
    """The forward keyword that hands ``model`` its KV cache: ``cache`` where its
    class's forward takes it (transformers 5.2x renamed it, and warns that
    ``past_key_values`` goes in 5.40), else ``past_key_values`` (older
    transformers). A LoRA-wrapped model passes it on to its base model's forward."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    takes = inspect.signature(type(base).forward).parameters  # the class's: tests patch instances
    return {"cache" if "cache" in takes else "past_key_values": kv}


def shared_prefix_length(prompts: list[list[int]]) -> int:
    """The shared prefix's length: tokens every one of ``prompts`` starts with, leaving each at
    least one token of its own (whose logits predict what follows); 0 for fewer than two
    prompts or a shared prefix under :data:`MIN_SHARED_PREFIX_TOKENS`. The sampler's and the
    update's rule."""
    n = min(len(os.path.commonprefix(prompts)), min(len(p) for p in prompts) - 1) if len(prompts) > 1 else 0
    return n if n >= MIN_SHARED_PREFIX_TOKENS else 0


def shared_prefix_kv(model, ids: list[int], device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Each layer's keys and values, (1, kv_heads, n, head_dim) each, of ``ids`` (n tokens
    at positions 0..n-1) run through ``model`` from an empty cache: the prefix prompts
    share, for the sampler (no gradients) and the update (with them)."""
    kv = DynamicCache()
    model(input_ids=torch.tensor([ids], device=device), **with_cache(model, kv), use_cache=True, logits_to_keep=1)
    return [(layer.keys, layer.values) for layer in attention_layers(kv)]


def attention_layers(kv: DynamicCache) -> list[Any]:
    """The cache's layers, each with ``keys`` and ``values`` (B, heads, tokens, head_dim):
    the only kind a causal LM's ``DynamicCache`` holds here (transformers also types
    linear-attention layers into the list)."""
    return cast(list[Any], kv.layers)
