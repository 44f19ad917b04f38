"""Resumable checkpoints: weights (or the LoRA adapter), optimizer state, RNG states.

A checkpoint holds the adapter (or the full model when LoRA is off), the
optimizer state and the RNG states, so a run resumes where it stopped, on
CPU or GPU.
"""

from __future__ import annotations

import pickle
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from transformers import AutoModelForCausalLM

from rlab.engine.policy.lora import is_lora
from rlab.store.errors import UsageError

#: Files inside a checkpoint directory.
ADAPTER_DIR = "adapter"
MODEL_DIR = "model"
OPTIMIZER_FILE = "optimizer.pt"
STATE_FILE = "trainer_state.pt"


class CheckpointError(UsageError, RuntimeError):
    """A checkpoint directory that is missing, incomplete or of another model kind."""



@dataclass
class Resumed:
    """What :func:`load_checkpoint` restored besides weights and optimizer.

    step: the training step the checkpoint was written after.
    rng_state: the caller's own RNG state as given to :func:`save_checkpoint`.
    """

    step: int
    rng_state: Any


def save_checkpoint(
    directory: str | Path, model, optimizer: torch.optim.Optimizer, step: int, rng_state: Any = None
) -> Path:
    """Write a resumable checkpoint to ``directory`` (replaced if present).

    Layout: ``adapter/`` (LoRA models: adapter only) or ``model/`` (full
    ``save_pretrained``), ``optimizer.pt`` and ``trainer_state.pt`` (step,
    ``rng_state`` and the torch CPU/CUDA and Python ``random`` global RNG
    states). ``rng_state`` must hold only plain Python values and tensors
    (e.g. ``random.Random.getstate()``), so loading needs no pickled code.
    Written to a temporary sibling and renamed, so a crash never leaves a
    half-written checkpoint under the final name; a write that fails (a
    full disk) removes the sibling. Returns the directory.

    Raises:
        CheckpointError: the checkpoint could not be written (the message
            names the folder, the reason and the fix); the previous
            checkpoints are untouched.
    """
    directory = Path(directory)
    partial = directory.with_name(directory.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    try:
        partial.mkdir(parents=True)
        weights_dir = partial / (ADAPTER_DIR if is_lora(model) else MODEL_DIR)
        model.save_pretrained(weights_dir, safe_serialization=True)
        torch.save(optimizer.state_dict(), partial / OPTIMIZER_FILE)
        torch.save({"step": step, "rng_state": rng_state, "global_rng": _global_rng()}, partial / STATE_FILE)
    except (OSError, RuntimeError, SafetensorError) as err:
        # torch.save reports a full disk as a RuntimeError, safetensors (the weights) as a SafetensorError
        shutil.rmtree(partial, ignore_errors=True)
        raise CheckpointError(f"cannot write the checkpoint of step {step} to {directory.parent}: "
                              f"{getattr(err, 'strerror', None) or err}; free disk space there, or keep fewer "
                              "checkpoints: resume the run with --resume NAME --keep-checkpoints 1") from None
    shutil.rmtree(directory, ignore_errors=True)
    partial.rename(directory)
    return directory


def load_checkpoint(directory: str | Path, model, optimizer: torch.optim.Optimizer) -> Resumed:
    """Restore weights, optimizer state and global RNG states from ``directory``.

    ``model`` and ``optimizer`` must be built as for the saved run (same
    base model, same LoRA settings); tensors are moved to the model's device,
    so a checkpoint written on CPU resumes on GPU and back.

    Raises:
        CheckpointError: the directory is missing a file, a file is damaged,
            it holds a full model where a LoRA one is expected (or the
            reverse), or its optimizer state is for other parameters (other
            LoRA settings).
    """
    directory = Path(directory)
    for name in (OPTIMIZER_FILE, STATE_FILE):
        if not (directory / name).is_file():
            raise CheckpointError(f"{directory} is not a complete checkpoint: {name} is missing")
    device = next(model.parameters()).device
    try:
        _load_weights(directory, model)
    except SafetensorError as err:  # a weights file cut short or overwritten
        raise _damaged(directory, err) from err
    try:
        optimizer_state = torch.load(directory / OPTIMIZER_FILE, map_location=device, weights_only=True)
        state = torch.load(directory / STATE_FILE, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, EOFError, RuntimeError) as err:  # torch.load's word for a broken file
        raise _damaged(directory, err) from err
    try:
        optimizer.load_state_dict(optimizer_state)
    except ValueError as err:
        raise CheckpointError(
            f"the optimizer state in {directory} does not fit this optimizer ({err}); "
            "resume with the same model, LoRA settings and trainer"
        ) from err
    _set_global_rng(state["global_rng"])
    return Resumed(step=int(state["step"]), rng_state=state["rng_state"])


def _damaged(directory: Path, err: Exception) -> CheckpointError:
    return CheckpointError(f"{directory} is damaged ({type(err).__name__}: {err}); it cannot be resumed from: "
                           "fork the run from an earlier checkpoint (rlab fork RUN@STEP)")


def load_weights(directory: str | Path, model) -> None:
    """Restore only the weights of a checkpoint (no optimizer, no RNG state):
    what evaluating a checkpoint needs. ``model`` is built as for the saved
    run (same base model; LoRA applied with the same settings when the run
    trained a LoRA adapter).

    Raises:
        CheckpointError: no checkpoint directory, or its weights do not fit.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"no checkpoint directory at {directory}; it may have been deleted")
    _load_weights(directory, model)


def _load_weights(directory: Path, model) -> None:
    device = next(model.parameters()).device
    if is_lora(model):
        if not (directory / ADAPTER_DIR).is_dir():
            raise CheckpointError(
                f"{directory} holds no LoRA adapter (it was saved without LoRA); "
                "resume with the same --lora-rank"
            )
        from peft.utils import load_peft_weights, set_peft_model_state_dict  # a LoRA model: peft is loaded

        weights = load_peft_weights(str(directory / ADAPTER_DIR), device=str(device))
        misfit = (f"the adapter in {directory} does not fit the model; resume with the same base model, "
                  "--lora-rank and --lora-targets")
        try:
            result = set_peft_model_state_dict(model, weights)
        except RuntimeError as err:  # shape mismatch: another rank
            raise CheckpointError(f"{misfit} ({err})") from err
        if result.unexpected_keys:  # type: ignore[attr-defined]  # peft's return is an untyped namedtuple
            raise CheckpointError(f"{misfit} (unexpected: {result.unexpected_keys[:2]})")  # type: ignore[attr-defined]
        return
    if not (directory / MODEL_DIR).is_dir():
        raise CheckpointError(f"{directory} holds a LoRA adapter; resume with LoRA on (--lora-rank > 0)")
    saved = AutoModelForCausalLM.from_pretrained(directory / MODEL_DIR, dtype=next(model.parameters()).dtype)
    # Copy into the live model rather than replacing it: the optimizer holds its parameters.
    model.load_state_dict(saved.state_dict())


def _global_rng() -> dict[str, Any]:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    return {"torch": torch.get_rng_state(), "cuda": cuda, "python": random.getstate()}


def _set_global_rng(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    # CUDA states come back only onto the same number of GPUs (a CPU-written checkpoint has none).
    if torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])
    random.setstate(state["python"])
