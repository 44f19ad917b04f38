"""LoRA adapters for the policy (Hu et al. 2021, arXiv 2106.09685) through ``peft``.

The base weights stay frozen and only the low-rank adapter trains, so the KL
reference is the same network with the adapter switched off
(:func:`reference_mode`) and no second copy of the model is loaded.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from pydantic import BaseModel, Field, field_validator, model_validator

from rlab.store.errors import UsageError

if TYPE_CHECKING:
    from peft import PeftModel


class LoraError(UsageError):
    """LoRA settings that do not fit the model (e.g. unknown target modules)."""



class LoraSettings(BaseModel):
    """LoRA hyper-parameters (peft ``LoraConfig`` fields of the same meaning).

    rank: r, the adapter's inner dimension (> 0). alpha: ``lora_alpha``; the
    update is scaled by alpha / rank (Hu et al. 2021, section 4.1); left out,
    it is 2 x rank (scale 2 at any rank).
    dropout: dropout on the adapter's input, in [0, 1). target_modules: names
    of the linear layers to adapt (suffixes of module names, e.g. ``q_proj``).
    """

    rank: int = Field(16, gt=0)
    alpha: float | None = Field(None, gt=0)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"], min_length=1
    )

    @field_validator("target_modules")
    @classmethod
    def _no_blank_names(cls, names: list[str]) -> list[str]:
        if any(not n.strip() for n in names):
            raise ValueError("target_modules holds an empty name; give layer names like q_proj,v_proj")
        return names

    @model_validator(mode="after")
    def _default_alpha(self) -> "LoraSettings":
        if self.alpha is None:
            self.alpha = 2.0 * self.rank
        return self


def apply_lora(model, settings: LoraSettings) -> "PeftModel":
    """Wrap ``model`` (a ``transformers`` causal LM) with a trainable LoRA adapter.

    The base weights are frozen (``requires_grad=False``); the adapter's B
    matrices start at zero, so the wrapped model's outputs equal the base
    model's until the first update.

    Raises:
        LoraError: a target module matches no linear layer of the model; the
            message lists the linear layer names the model has.
    """
    missing = [t for t in settings.target_modules if not _has_linear(model, t)]
    if missing:
        raise LoraError(
            f"LoRA target modules {missing} match no linear layer of this model; "
            f"pass --lora-targets with names from: {', '.join(_linear_names(model))}"
        )
    # peft is imported here, not at module level: it pulls in torch.distributed
    # and torch._dynamo (seconds at start-up) that a full-weight run never uses.
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,  # type: ignore[arg-type]  # peft annotates int; it scales by alpha / r as a float
        lora_dropout=settings.dropout,
        target_modules=list(settings.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, config)


def _linear_names(model) -> list[str]:
    names = {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    return sorted(names)


def _has_linear(model, target: str) -> bool:
    return any(
        isinstance(m, torch.nn.Linear) and (n == target or n.endswith("." + target))
        for n, m in model.named_modules()
    )


def is_lora(model) -> bool:
    """True when ``model`` is a ``peft`` model carrying an adapter."""
    # Without peft imported no peft model can exist; asking sys.modules keeps
    # full-weight runs from importing it.
    peft = sys.modules.get("peft")
    return peft is not None and isinstance(model, peft.PeftModel)


@contextlib.contextmanager
def reference_mode(model) -> Iterator[None]:
    """Run ``model`` as the frozen base model (adapter disabled) inside the block.

    This is the KL reference policy pi_ref when LoRA is on: the base weights
    never train, so disabling the adapter gives exactly the initial policy.
    Use it with ``torch.no_grad()``.

    Raises:
        TypeError: ``model`` has no LoRA adapter (keep a frozen copy instead).
    """
    if not is_lora(model):
        raise TypeError("reference_mode needs a LoRA model (apply_lora); without LoRA keep a frozen copy")
    with model.disable_adapter():
        yield


def save_adapter(model, directory: str | Path) -> Path:
    """Save only the adapter (``adapter_config.json`` + safetensors) to ``directory``.

    This is the layout vLLM's ``--enable-lora`` loads. Returns the directory.

    Raises:
        TypeError: ``model`` has no LoRA adapter.
    """
    if not is_lora(model):
        raise TypeError("save_adapter needs a LoRA model (apply_lora); use save_pretrained for a full model")
    directory = Path(directory)
    model.save_pretrained(directory, safe_serialization=True)
    return directory
