"""The weights the policy samples with: its LoRA adapter merged in, or all of it in bf16.

Sampling through peft's LoRA layers runs every adapted linear as the base
matmul plus the adapter's two (x @ A @ B, dropout, scaling) and the wrapper's
Python around them; a GRPO step's decoding is mostly small matmuls, so that
overhead is paid at every token. :class:`SamplingWeights` keeps a plain model
of the same architecture whose adapted weights are W + scaling * B @ A
(peft's own ``get_delta_weight``), sharing every other weight with the
trained model; it costs the adapted layers' memory once (SmolLM2-135M, q/k/v/o:
106 MB in float32) and samples at the base model's speed. The trained model
keeps its adapter unmerged: merging it in place and out again every step
would add float rounding to the frozen base weights each time.

``dtype=torch.bfloat16`` (``--bf16`` on a CPU with native bf16, or a CUDA
device; ``engine.policy.device``) keeps the whole copy in bf16, which halves
the bytes every decoding step reads. The sampler's log-probabilities are
then not the trainer's to float tolerance, so the trainer takes the policy's
own (its first update's forward pass, before any weight moves) as the old
ones of the ratio (``engine.train.trainer``), as TRL does when it samples
with vLLM.

The copy is rebuilt lazily, when a trained weight changed since the last
build: torch counts in-place writes to a tensor (``Tensor._version``), which
an optimizer step and a checkpoint load both are, so no caller has to say so.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from rlab.engine.policy.lora import is_lora


class SamplingWeights:
    """The model :meth:`model` hands the sampler, rebuilt when the trained weights moved.

    Args:
        trained: the policy's ``transformers`` causal LM (plain or peft LoRA), trained in place.
        dtype: the copy's dtype; None keeps the trained model's (then a model
            without LoRA is sampled as it is, without a copy).
    """

    def __init__(self, trained: Any, dtype: torch.dtype | None = None) -> None:
        self.trained = trained
        self.dtype = dtype
        self._copy: Any = None
        self._versions: list[int] | None = None

    @property
    def copies(self) -> bool:
        """Whether sampling uses a copy at all (LoRA merged, or another dtype)."""
        return is_lora(self.trained) or self.dtype is not None

    def model(self) -> Any:
        """The model to sample with, current with the trained weights."""
        if not self.copies:
            return self.trained
        versions = [p._version for p in self._watched()]
        if self._copy is None or versions != self._versions:
            self._copy, self._versions = self._build(), versions
        return self._copy

    def _watched(self) -> Iterator[torch.Tensor]:
        """The tensors whose writes make the copy stale: the trained ones (all of them
        for a bf16 copy of a model without LoRA)."""
        return (p for p in self.trained.parameters() if p.requires_grad)

    @torch.no_grad()
    def _build(self) -> Any:
        """A plain model with the adapter merged (and cast to ``dtype``), sharing what it can."""
        base = self.trained.get_base_model() if is_lora(self.trained) else self.trained
        merged = _merged_weights(self.trained) if is_lora(self.trained) else {}
        state = {}
        for name, tensor in base.state_dict(keep_vars=False).items():
            if "lora_" in name:
                continue
            plain = name.replace(".base_layer.", ".")
            value = merged.get(plain, tensor)
            state[plain] = value if self.dtype is None else value.to(self.dtype)
        with torch.device("meta"):
            copy: Any = type(base)(base.config)
        copy.load_state_dict(state, assign=True)
        for name, buffer in base.named_buffers():  # the non-persistent ones (rotary frequencies) are no state
            owner, _, leaf = name.replace(".base_layer.", ".").rpartition(".")
            module = copy.get_submodule(owner)
            if getattr(module, leaf).is_meta:
                module.register_buffer(leaf, buffer, persistent=False)
        copy.tie_weights()
        return copy.eval()


def _merged_weights(model) -> dict[str, torch.Tensor]:
    """Each LoRA-adapted linear's weight with its active adapter merged in, by the plain
    model's parameter name (``model.layers.0.self_attn.q_proj.weight``)."""
    from peft.tuners.lora import LoraLayer  # a LoRA model: peft is loaded

    prefix = "base_model.model."
    out: dict[str, torch.Tensor] = {}
    for name, module in model.named_modules():
        if not isinstance(module, LoraLayer) or not module.active_adapters:
            continue
        layer: Any = module  # peft's lora.Linear: get_delta_weight is its, not LoraLayer's
        weight: torch.Tensor = layer.get_base_layer().weight.detach().clone()
        for adapter in layer.active_adapters:
            if adapter in layer.lora_A:
                weight += layer.get_delta_weight(adapter)
        out[f"{name.removeprefix(prefix)}.weight"] = weight
    return out
