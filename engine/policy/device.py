"""Where and how the policy trains: CPU threads, bf16 autocast, gradient checkpointing, GPU memory.

The forward pass runs under bf16 autocast where the device computes bf16
natively (a GPU with bf16; a CPU with AVX-512 BF16 or AMX), for a real
model; gradient checkpointing trades compute for activation memory; the peak
memory of each step is reported as a metric (CUDA).
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch

from rlab.store.errors import UsageError


def set_cpu_threads(threads: int | None, *, tiny_policy: bool, building: bool = False) -> None:
    """Set torch's intra-op CPU threads: ``threads``, or by default :func:`default_cpu_threads`.

    The tiny policy's 128-wide matrices gain nothing from a second thread,
    and on a 2-core laptop that thread spin-waits against the TUI's process
    for the other core: measured on 2 cores with the TUI attached, 2.47
    steps/s with torch's default of 2 threads against 4.42 with one.
    """
    torch.set_num_threads(threads or default_cpu_threads(tiny_policy=tiny_policy, building=building))


def default_cpu_threads(*, tiny_policy: bool, building: bool = False) -> int:
    """Torch's CPU threads when none are given: 1 for the tiny policy, one per core but one for
    a real model. The core left is the TUI's, the reward and tool processes' and the OS's:
    torch's threads spin-wait, so one that shares a busy core stalls every matmul (issue 59: a
    SmolLM2 eval of 8 examples on a loaded 2-core machine had not ended after 11 min with a
    thread per core, and took 7.5 min with one). A tiny policy's build (``building``) takes
    every core: its steps are 64 conversations, thousands of tokens, where a second thread
    pays (shop_agent's step 0.61 -> 0.36 s on 2 cores), and meanwhile the TUI only shows the
    build's bar and no reward or tool process runs."""
    if building:
        return len(os.sched_getaffinity(0))
    return 1 if tiny_policy else max(1, len(os.sched_getaffinity(0)) - 1)


#: CPU flags (Linux /proc/cpuinfo) of native bf16 arithmetic: AVX-512 BF16 (AMD Zen 4, Intel
#: Cooper Lake on) and AMX (Intel Sapphire Rapids on), which oneDNN's bf16 matmuls use.
NATIVE_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def bf16_supported(device: str | torch.device) -> bool:
    """True when ``device`` computes in bf16 natively: a CUDA GPU with bf16, or a CPU
    with :data:`NATIVE_BF16_CPU_FLAGS` whose oneDNN is not capped below them
    (:data:`ONEDNN_ISAS_WITHOUT_BF16`); elsewhere bf16 is emulated, slower than float32."""
    kind = torch.device(device).type
    if kind == "cuda":
        return torch.cuda.is_bf16_supported()
    capped = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper() in ONEDNN_ISAS_WITHOUT_BF16
    return kind == "cpu" and not capped and bool(set(NATIVE_BF16_CPU_FLAGS) & _cpu_flags())


#: oneDNN's instruction-set caps (``ONEDNN_MAX_CPU_ISA``) below AVX512_CORE_BF16: under one,
#: oneDNN's bf16 matmuls are emulated whatever the CPU has, as on a laptop with AVX2 only (the
#: benches set it, with ATEN_CPU_CAPABILITY=avx2, to stand in for one).
ONEDNN_ISAS_WITHOUT_BF16 = frozenset({"SSE41", "AVX", "AVX2", "AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE",
                                      "AVX512_CORE_VNNI"})


def _cpu_flags() -> set[str]:
    return {flag for line in _cpuinfo_lines() if line.startswith("flags") for flag in line.split(":", 1)[1].split()}


def _cpuinfo_lines() -> list[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            return handle.read().splitlines()
    except OSError:  # not Linux: no flags known, so no native bf16 assumed
        return []


#: Parameters from which a model computes in bf16 by default on a CPU with native bf16:
#: below it decoding is bound by op dispatch, not by the matmuls bf16 halves (the tiny
#: policy's 0.5 M samples no faster in bf16), and float32 keeps its runs exact.
CPU_BF16_MIN_PARAMETERS = 50_000_000


def uses_bf16(model, device: str | torch.device, wanted: bool | None) -> bool:
    """Whether a run's policy computes in bf16: ``wanted`` (``--bf16``), or by default on a
    GPU with bf16, and on a CPU with native bf16 for a model of at least
    :data:`CPU_BF16_MIN_PARAMETERS` parameters.

    Raises:
        UsageError: bf16 asked for on a device without native bf16.
    """
    supported = bf16_supported(device)
    if wanted and not supported:
        raise UsageError(f"bf16 was asked for but device {device!r} lacks native bf16 (a GPU with bf16, or a CPU "
                         f"with {' or '.join(NATIVE_BF16_CPU_FLAGS)}); use --no-bf16")
    if wanted is not None:
        return wanted
    large = sum(p.numel() for p in model.parameters()) >= CPU_BF16_MIN_PARAMETERS
    return supported and (torch.device(device).type == "cuda" or large)


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
        bf16: ``None`` = :func:`uses_bf16`'s default; ``False`` = never;
            ``True`` = required.

    Returns:
        A zero-argument callable giving a fresh context manager to wrap each
        forward pass in: ``torch.autocast(device type, dtype=torch.bfloat16)``
        (float32 weights, bf16 matmuls) or ``contextlib.nullcontext()``. Logits
        come out in bf16 under autocast; cast them to float32 before ``log_softmax``.

    Raises:
        ValueError: ``bf16=True`` on a device without native bf16.
    """
    if gradient_checkpointing:
        _enable_checkpointing(model)
    if not uses_bf16(model, device, bf16):
        return contextlib.nullcontext
    return lambda: torch.autocast(torch.device(device).type, dtype=torch.bfloat16)


#: On CPU, a training pass whose sequences are at most this many tokens (prompt and
#: completion) runs eager attention (two matmuls and a softmax) instead of SDPA: torch's
#: CPU flash-attention backward costs some 30 ms a layer however short the sequences.
#: Measured on one core of an AMD EPYC (bf16, 9 heads of 64, fwd + bwd of one layer):
#: 37.5 ms SDPA vs 7.9 ms eager at 16 x 64 tokens, 42.5 vs 27.2 at 4 x 256, 82 vs 74 at
#: 2 x 512, 90 vs 176 at 1,024 tokens; a GRPO update of SmolLM2-135M on arithmetic
#: (64 rows, prompts of ~50 tokens) 18-20 s with SDPA, 14-15 s eager.
CPU_EAGER_ATTENTION_MAX_TOKENS = 512


@contextlib.contextmanager
def training_attention(models: Sequence[Any], device: str | torch.device, tokens: int) -> Iterator[None]:
    """Within the block, ``models`` (plain or LoRA: the policy and a KL reference) run eager
    attention when they train on CPU sequences of at most
    :data:`CPU_EAGER_ATTENTION_MAX_TOKENS` (``tokens``: the widest micro-batch's prompt
    and completion width) and would run SDPA; otherwise nothing changes. Restored on
    exit, error or not: the sampling copy shares the policy's config.

    Wrap the forward *and* backward passes (a checkpointed layer recomputes its
    forward in the backward pass, and must meet the attention it saved). The
    result is the same attention to float tolerance, only faster.
    """
    short_on_cpu = torch.device(device).type == "cpu" and tokens <= CPU_EAGER_ATTENTION_MAX_TOKENS
    bases = [model.get_base_model() if hasattr(model, "get_base_model") else model for model in models]
    switched = [base for base in bases
                if short_on_cpu and getattr(base.config, "_attn_implementation", None) == "sdpa"]
    for base in switched:
        base.set_attn_implementation("eager")
    try:
        yield
    finally:
        for base in switched:
            base.set_attn_implementation("sdpa")


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


def describe_machine() -> dict[str, object]:
    """What a speed figure was taken on, for benchmarks' JSON: the CPU's model and the
    flags that decide its matmul speed, its cores, torch's threads, whether it
    computes bf16 natively, the instruction set torch's kernels use (and oneDNN's cap:
    a stand-in for an AVX2-only CPU sets both), the load average (1, 5, 15 min) and a GPU's name. Two
    figures are comparable only on the same line of this."""
    flags = _cpu_flags()
    model = next((line.split(":", 1)[1].strip() for line in _cpuinfo_lines() if line.startswith("model name")),
                 platform.processor())
    return {"cpu": model, "cpu_flags": [f for f in ("avx2", "avx512f", *NATIVE_BF16_CPU_FLAGS) if f in flags],
            "cores": len(os.sched_getaffinity(0)), "torch_threads": torch.get_num_threads(),
            "bf16_native_cpu": bf16_supported("cpu"), "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA"),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}
