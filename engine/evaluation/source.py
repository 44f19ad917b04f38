"""Where loop A and B completions come from: a model directory, a stored
checkpoint (``RUN[@STEP]``, found by ``engine.run.fork.find_checkpoint``), or the tiny policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlab.engine.run.fork import CheckpointRef
from rlab.engine.run.manifest import sha256_files
from rlab.engine.policy.lora import LoraSettings, apply_lora
from rlab.engine.policy.model import Policy, default_device
from rlab.engine.policy.smollm2 import resolve_model
from rlab.engine.train.checkpoint import ADAPTER_DIR, MODEL_DIR, load_weights
from rlab.engine.train.warm_start import ensure_tiny_model


def load_policy(*, scenario, model: Path | None, checkpoint: CheckpointRef | None, seed: int,
                device: str | None) -> tuple[Policy, dict[str, Any]]:
    """The policy to measure and the manifest's ``model`` entry.

    ``checkpoint``: the run's base model (with LoRA when it trained an
    adapter) with the checkpoint's weights. ``model``: that directory, or an
    alias (``smollm2-135m``) resolved as ``rlab run`` resolves it.
    Neither: the tiny policy a run with ``seed`` starts from.

    Raises:
        engine.policy.model.ModelLoadError, engine.train.checkpoint.CheckpointError.
    """
    device = device or default_device()
    if checkpoint is None:
        model_dir = resolve_model(model) if model is not None else ensure_tiny_model(scenario, seed=seed)
        return Policy.load(model_dir, device), {"path": str(model_dir),
                                                "weights_sha256": sha256_files(model_dir)}
    base = Path(checkpoint.config["model_dir"])
    policy = Policy.load(base, device)
    if checkpoint.path is None:  # a run's start: its base weights, as it began
        return policy, {"path": str(base), "weights_sha256": sha256_files(base),
                        "checkpoint": {"run": checkpoint.run_name, "step": checkpoint.step, "path": None}}
    if checkpoint.config.get("lora_rank"):
        policy.model = apply_lora(policy.model, LoraSettings(
            rank=checkpoint.config["lora_rank"], alpha=checkpoint.config.get("lora_alpha"),
            target_modules=checkpoint.config.get("lora_targets") or LoraSettings().target_modules))
    load_weights(checkpoint.path, policy.model)
    weights = checkpoint.path / (ADAPTER_DIR if checkpoint.config.get("lora_rank") else MODEL_DIR)
    return policy, {"path": str(base), "weights_sha256": sha256_files(weights),
                    "checkpoint": {"run": checkpoint.run_name, "step": checkpoint.step,
                                   "path": str(checkpoint.path)}}
