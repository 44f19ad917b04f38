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

``int8=True`` (``--sampler-int8``) quantizes the copy's linear layers with
torch's dynamic int8 quantization (fbgemm: int8 weights per output channel,
each call's activations on one scale, int8 matmuls with AVX2 or AVX-512
VNNI). Measured on SmolLM2-135M, 64 rows decoding, 2 cores (docs/tasks.md,
"An int8 sampler on a CPU without native bf16"): 1.5-1.6x float32's
tokens/s, but the log-probs of float32's greedy tokens move by 1.1-1.7
nats on average (one decoder layer's linears alone by 0.08-0.7; the down
projections' inputs, whose outliers one activation scale a call cannot
hold, lose most), where bf16's move by 0.02-0.05, and each rebuild costs
2.6-2.9 s. Weight-only int8, the accurate kind (0.08-0.10 nats), has no
fast CPU kernel in torch 2.13 or torchao 0.18 (torchao turns the int8
weight back to float at each call: slower than float32;
``torch._weight_int8pack_mm`` is a one-row kernel: 11 tokens/s at 64
rows), so it is not offered. The truncated importance weights of
``engine.train.trainer`` correct for the int8 sampler as for any other;
it is off by default.

The copy is rebuilt lazily, when a trained weight changed since the last
build: torch counts in-place writes to a tensor (``Tensor._version``), which
an optimizer step and a checkpoint load both are, so no caller has to say so.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import torch

from rlab.engine.policy.lora import is_lora


class SamplingWeights:
    """The model :meth:`model` hands the sampler, rebuilt when the trained weights moved.

    Args:
        trained: the policy's ``transformers`` causal LM (plain or peft LoRA), trained in place.
        dtype: the copy's dtype; None keeps the trained model's (then a model
            without LoRA is sampled as it is, without a copy, unless ``int8``).
        int8: quantize the copy's linear layers to int8 (module docstring).
    """

    def __init__(self, trained: Any, dtype: torch.dtype | None = None, int8: bool = False) -> None:
        self.trained = trained
        self.dtype = dtype
        self.int8 = int8
        self._copy: Any = None
        self._versions: list[int] | None = None

    @property
    def copies(self) -> bool:
        """Whether sampling uses a copy at all (LoRA merged, another dtype, or int8)."""
        return is_lora(self.trained) or self.dtype is not None or self.int8

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
        return quantized(copy) if self.int8 else copy.eval()


def quantized(model: Any, keep: tuple[str, ...] = ()) -> Any:
    """``model`` (float32, in eval mode) with each ``nn.Linear`` swapped in place for
    torch's dynamic int8 one (weights per output channel), but those whose module name
    contains a part in ``keep`` (``tests/bench/int8_sampler.py --keep-float``; a run keeps none)."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    model.eval()
    chosen = {name: per_channel_dynamic_qconfig for name, module in model.named_modules()
              if isinstance(module, torch.nn.Linear) and not any(part in name for part in keep)}
    with warnings.catch_warnings():
        # torch.ao's quantization API is deprecated for torchao, whose int8 linear has no fast CPU kernel
        # (module docstring): the warning is not the user's to act on.
        warnings.simplefilter("ignore")
        quantize_dynamic(model, chosen, dtype=torch.qint8, inplace=True)
    return model


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
