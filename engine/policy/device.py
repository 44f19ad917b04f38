"""Where and how the policy trains: CPU threads, bf16 autocast, gradient checkpointing, GPU memory.

On CUDA the forward pass runs under bf16 autocast where the GPU supports it;
gradient checkpointing trades compute for activation memory; the peak memory
of each step is reported as a metric. On CPU all of this is a no-op.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

import torch


def set_cpu_threads(threads: int | None, *, tiny_policy: bool) -> None:
    """Set torch's intra-op CPU threads: ``threads``, or by default 1 for the tiny policy.

    The tiny policy's 128-wide matrices gain nothing from a second thread,
    and on a 2-core laptop that thread spin-waits against the TUI's process
    for the other core: measured on 2 cores with the TUI attached, 2.47
    steps/s with torch's default of 2 threads against 4.42 with one. Real
    models keep torch's default (one thread per core) unless told.
    """
    if threads is None and tiny_policy:
        threads = 1
    if threads is not None:
        torch.set_num_threads(threads)


def bf16_supported(device: str | torch.device) -> bool:
    """True when ``device`` is a CUDA device whose GPU computes in bf16 natively."""
    return torch.device(device).type == "cuda" and torch.cuda.is_bf16_supported()


def training_options(
    model,
    device: str | torch.device,
    *,
    gradient_checkpointing: bool = False,
    bf16: bool | None = None,
) -> Callable[[], AbstractContextManager]:
    """Set up ``model`` for training on ``device``; return the autocast factory.

    Args:
        model: the policy's causal LM (plain or LoRA).
        device: where it trains, e.g. ``"cpu"`` or ``"cuda"``.
        gradient_checkpointing: recompute activations in the backward pass
            (non-reentrant, so it works with frozen LoRA base weights).
        bf16: ``None`` = bf16 autocast when the GPU supports it; ``False`` =
            never; ``True`` = required.

    Returns:
        A zero-argument callable giving a fresh context manager to wrap each
        forward pass in: ``torch.autocast("cuda", dtype=torch.bfloat16)`` or
        ``contextlib.nullcontext()`` (always on CPU). Logits come out in bf16
        under autocast; cast them to float32 before ``log_softmax``.

    Raises:
        ValueError: ``bf16=True`` on a device without bf16 support.
    """
    if gradient_checkpointing:
        _enable_checkpointing(model)
    supported = bf16_supported(device)
    if bf16 and not supported:
        raise ValueError(f"bf16 was asked for but device {device!r} lacks it; use --no-bf16 or a bf16 GPU")
    if bf16 is False or not supported:
        return contextlib.nullcontext
    return lambda: torch.autocast("cuda", dtype=torch.bfloat16)


def _enable_checkpointing(model) -> None:
    # transformers 5 renamed gradient_* to activation_checkpointing_*; 4.x has only the old name.
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    model.config.use_cache = False  # the KV cache is useless in training and clashes with recompute


def peak_memory_metric(device: str | torch.device) -> dict[str, float]:
    """``{"gpu/peak_allocated_gb": x}`` since the last call, then reset; ``{}`` off CUDA.

    x is ``torch.cuda.max_memory_allocated`` in GB (1e9 bytes): the most
    memory tensors held at once on that device. Call it once per step, after
    the update, so each value is that step's peak.
    """
    device = torch.device(device)
    if device.type != "cuda":
        return {}
    peak = torch.cuda.max_memory_allocated(device) / 1e9
    torch.cuda.reset_peak_memory_stats(device)
    return {"gpu/peak_allocated_gb": peak}


def clock(device: str | torch.device) -> float:
    """``time.perf_counter()`` once ``device`` has finished its queued work: CUDA
    kernels run asynchronously, so a phase timer read without waiting would end
    before its kernels do and charge their time to the next phase."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
