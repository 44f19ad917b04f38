"""The int8 sampling copy of SmolLM2-135M against float32 and bf16: speed and fidelity.

    python tests/bench/int8_sampler.py

Prints one JSON object. For each sampling copy (``engine.policy.sampling_weights``:
float32 with a LoRA rank-16 adapter merged, bf16 on a CPU with native bf16, and
``--sampler-int8``'s torch dynamic int8): new tokens per second sampling a run's
step shape (8 prompts x 8 rollouts, 24 new tokens, temperature 0.8; the best
of two calls after a warm-up), the seconds one rebuild of the copy takes (a run
pays it after every optimizer step), the share of greedy tokens that are the
float32 copy's at the same positions (8 prompts, 24 tokens), and the mean and
max |log-prob difference| of the float32 policy's greedy tokens (nats).
``--keep-float NAMES`` (repeatable; NAMES a comma list of module-name parts
such as ``down_proj``, ``mlp``, ``lm_head``) also measures an int8 copy whose
linears named so stay float32 (``int8_keep_NAMES``): where the int8 error
comes from, and what leaving it out costs in speed. Set
ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 FBGEMM_ENABLE_INSTRUCTIONS=AVX2
MKL_ENABLE_INSTRUCTIONS=AVX2 to stand in for a CPU without AVX-512; the JSON
records the machine and those caps.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[2] / "tests" / "bench")]

from real_model import isa_caps  # noqa: E402

from rlab.engine.policy.device import bf16_supported, describe_machine  # noqa: E402
from rlab.engine.policy.lora import LoraSettings, apply_lora  # noqa: E402
from rlab.engine.policy.model import Policy  # noqa: E402
from rlab.engine.policy.sampling import sample  # noqa: E402
from rlab.engine.policy.sampling_weights import SamplingWeights, quantized  # noqa: E402
from rlab.engine.policy.smollm2 import ensure_smollm2  # noqa: E402

PROMPTS = [f"What is {a} + {b}? Answer with a number." for a, b in zip(range(11, 19), range(31, 39))]


def chosen_logprobs(model, ids: list[int], start: int) -> torch.Tensor:
    """Log-probs (nats) of ``ids[start:]`` under ``model``, one forward pass."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, start - 1:-1].float()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[start:])[:, None])[:, 0]


def measure(policy: Policy, build: Callable[[], Any], reference: list[list[int]] | None,
            prompts: list[list[int]]) -> tuple[dict, list[list[int]]]:
    """One sampling copy's figures (module docstring) and its greedy tokens; ``build``
    makes the copy from the policy's current weights, as after an optimizer step."""
    t0 = time.perf_counter()
    model = build()
    rebuild = time.perf_counter() - t0

    def draw(rows: list[list[int]], new: int, temperature: float) -> list[list[int]]:
        return sample(model, rows, max_new_tokens=new, temperature=temperature, pad_id=policy.pad_id,
                      eos_id=policy.eos_id, device=policy.device).tokens

    rows = [p for p in prompts for _ in range(8)]
    draw(rows[:8], 4, 0.8)
    best = 0.0
    for _ in range(2):
        t0 = time.perf_counter()
        out = draw(rows, 24, 0.8)
        best = max(best, sum(map(len, out)) / (time.perf_counter() - t0))
    greedy = draw(prompts, 24, 0.0)
    figures = {"tokens_per_s": round(best, 1), "rebuild_seconds": round(rebuild, 2)}
    if reference is not None:
        pairs = [(a, b) for g, r in zip(greedy, reference) for a, b in zip(g, r)]
        diffs = torch.cat([(chosen_logprobs(model, p + r, len(p)) - chosen_logprobs(policy.model, p + r, len(p))).abs()
                           for p, r in zip(prompts, reference) if r])
        figures |= {"greedy_agreement": round(sum(a == b for a, b in pairs) / len(pairs), 3),
                    "logprob_abs_diff_mean": round(diffs.mean().item(), 3),
                    "logprob_abs_diff_max": round(diffs.max().item(), 3)}
    return figures, greedy


def int8_keeping(trained: Any, keep: tuple[str, ...]) -> Any:
    """A merged float32 copy of ``trained``, its linears in int8 but those named in ``keep``."""
    return quantized(SamplingWeights(trained).model(), keep)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep-float", action="append", default=[], metavar="NAMES",
                        help="also an int8 copy whose linears with these name parts (comma list) stay float32")
    args = parser.parse_args()
    torch.manual_seed(0)
    policy = Policy.load(ensure_smollm2(), "cpu")
    policy.model = apply_lora(policy.model, LoraSettings(rank=16))
    prompts = [policy.render([{"role": "user", "content": text}]) for text in PROMPTS]
    out: dict = {"date": time.strftime("%Y-%m-%d"), "machine": describe_machine(), "cpu_isa_caps": isa_caps()}
    out["float32"], reference = measure(policy, lambda: SamplingWeights(policy.model).model(), None, prompts)
    if bf16_supported("cpu"):
        out["bf16"], _ = measure(policy, lambda: SamplingWeights(policy.model, torch.bfloat16).model(), reference,
                                 prompts)
    out["int8"], _ = measure(policy, lambda: SamplingWeights(policy.model, int8=True).model(), reference, prompts)
    for names in args.keep_float:
        keep = tuple(part.strip() for part in names.split(",") if part.strip())
        out[f"int8_keep_{'+'.join(keep)}"], _ = measure(policy, lambda: int8_keeping(policy.model, keep), reference,
                                                        prompts)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
