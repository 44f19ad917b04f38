"""Benchmark: the hf and vLLM rollout backends on SmolLM2-135M-Instruct, on this CPU.

Two parts, one JSON object on stdout:

- ``generation``: tokens per second for ``--sequences`` completions of
  ``--new-tokens`` tokens at temperature 1 (the chat prompts below, each
  repeated to fill the batch): transformers' generate through
  ``Policy.sample`` (float32), and a local vLLM CPU server (bfloat16,
  LoRA enabled, as ``rlab run --backend vllm`` starts it) on the base
  model and through a loaded rank-16 adapter. One warm-up request each,
  then the best of ``--repeat`` timed runs. ``tokens_per_s`` counts the
  tokens returned (EOS included).
- ``grpo_step_s``: seconds per GRPO step of ``rlab run`` (the task
  examples/tasks/reasoning_gym_arithmetic, where SmolLM2's groups have
  spread, so every step trains; ``--model smollm2-135m``, LoRA rank 16,
  P=``--sequences``/8 prompts x G=8, ``--new-tokens`` per completion) with each backend, split
  into generation, scoring, update and adapter sync as the engine measures
  them (``time/*`` step metrics of engine.step.train_step); the median over
  steps 2..``--steps`` (step 1 warms up; with ``--steps 1``, step 1).
  ``vllm_over_hf`` is the ratio of
  total step seconds; the target (issue 14) is at most 0.5.

Each finished part is also printed to stderr as one JSON line, so a run
stopped early keeps what it measured. The vLLM server runs under ``$RLAB_VLLM_PYTHON`` or the venv that
scripts/vllm_venv.sh builds. Figures taken while other jobs share the CPU
are labelled by ``--label`` (default "measured under load"). Run:
``RLAB_VLLM_PYTHON="$(scripts/vllm_venv.sh)" PYTHONPATH=. nice -n 10 .venv/bin/python tests/bench/backends.py``
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from rlab.engine.run.config import RunConfig
from rlab.engine.paths import cache_root
from rlab.engine.policy.lora import LoraSettings, apply_lora
from rlab.engine.policy.model import Policy
from rlab.engine.policy.smollm2 import ensure_smollm2
from rlab.engine.policy.vllm import VLLMBackend
from rlab.engine.policy.vllm_launch import ServeSettings, find_vllm_python, launch, server_dtype
from rlab.engine.step import run
from rlab.engine.types import Sample

PROMPTS = ["What is 17 + 25?", "Write a haiku about rain.", "Explain what a prime number is.",
           "Name three fruits.", "What is the capital of Spain?", "Count from one to ten.",
           "Describe a cat in one sentence.", "Why is the sky blue?"]
PHASES = ("generation", "scoring", "update", "adapter_sync")
TASK = Path(__file__).resolve().parents[2] / "examples" / "tasks" / "reasoning_gym_arithmetic"


def timed(sample, prompts: list[list[int]], new_tokens: int, repeat: int) -> dict:
    """Best-of-``repeat`` tokens/s of ``sample(prompts, ...)`` after one warm-up call."""
    sample(prompts[:2], max_new_tokens=4, temperature=1.0)
    best = None
    for _ in range(repeat):
        start = time.perf_counter()
        samples: list[Sample] = sample(prompts, max_new_tokens=new_tokens, temperature=1.0)
        seconds = time.perf_counter() - start
        tokens = sum(len(s.token_ids) for s in samples)
        if best is None or tokens / seconds > best["tokens_per_s"]:
            best = {"tokens_per_s": round(tokens / seconds, 1), "seconds": round(seconds, 2), "tokens": tokens}
    assert best is not None
    return best


def partial(name: str, value: dict) -> dict:
    """Print one finished part to stderr at once (a long run stopped early keeps it); return it."""
    print(json.dumps({"part": name, **value}), file=sys.stderr, flush=True)
    return value


def generation(model_dir: Path, url: str, args, adapter_dir: Path) -> dict:
    """Tokens/s: HF generate, vLLM base model, vLLM through a LoRA adapter."""
    policy = Policy.load(model_dir, "cpu")
    prompts = [policy.render([{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}])
               for i in range(args.sequences)]
    result = {"hf_generate": partial("hf_generate", timed(policy.sample, prompts, args.new_tokens, args.repeat))}
    backend = VLLMBackend(url, render=policy.render, timeout_s=1800)
    result["vllm_base"] = partial("vllm_base", timed(backend.sample, prompts, args.new_tokens, args.repeat))
    backend.sync_policy(apply_lora(policy.model, LoraSettings(rank=16)), 0, adapter_dir)
    result["vllm_adapter"] = partial("vllm_adapter", timed(backend.sample, prompts, args.new_tokens, args.repeat))
    backend.close()
    return result


def grpo_steps(model_dir: Path, backend: str, url: str, args, folder: Path) -> dict:
    """Median seconds per phase of steps 2..N of a real ``rlab run`` with ``backend``."""
    db = folder / f"{backend}.db"
    config = RunConfig(task=str(TASK), model=model_dir, backend=backend, vllm_url=url if backend == "vllm" else None,
                       lora_rank=16, prompts_per_step=max(1, args.sequences // 8), group_size=8,
                       max_new_tokens=args.new_tokens, temperature=1.0, max_steps=args.steps, eval_size=1,
                       eval_every=10_000, checkpoint_every=10_000, db=db, seed=0)
    summary = run(config)
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT metrics FROM steps WHERE run_id = ? AND step >= ? ORDER BY step",
                            [summary["run_id"], 2 if args.steps > 1 else 1]).fetchall()
    metrics = [json.loads(r[0]) for r in rows if "time/generation" in json.loads(r[0])]
    out = {phase: round(statistics.median(m[f"time/{phase}"] for m in metrics), 2) for phase in PHASES}
    out["total"] = round(statistics.median(m["step_seconds"] for m in metrics), 2)
    out["trained_samples"] = round(statistics.median(m["trained_samples"] for m in metrics))
    out["tokens_per_step"] = round(statistics.median(m["completions/mean_length"] for m in metrics)
                                   * args.sequences)
    return partial(f"grpo_step_{backend}", out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sequences", type=int, default=32, help="completions per batch / per step")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=1, help="timed generation runs (best kept)")
    parser.add_argument("--steps", type=int, default=3, help="GRPO steps per backend (step 1 is warm-up)")
    parser.add_argument("--label", default="measured under load (2 CPU cores shared with other jobs, nice 10)")
    args = parser.parse_args()
    default_venv = cache_root() / "vllm-venv" / "bin" / "python"
    python = find_vllm_python(None if os.environ.get("RLAB_VLLM_PYTHON") else default_venv)
    model_dir = ensure_smollm2()
    folder = Path(tempfile.mkdtemp(prefix="rlab-bench-backends-"))
    started = time.perf_counter()
    with launch(ServeSettings(model_dir, max_lora_rank=16), python, log=(folder / "vllm.log").open("w"),
                timeout_s=1800) as server:
        start_s = time.perf_counter() - started
        gen = generation(model_dir, server.url, args, folder / "adapters")
        steps = {b: grpo_steps(model_dir, b, server.url, args, folder) for b in ("vllm", "hf")}
    ratio = steps["vllm"]["total"] / steps["hf"]["total"]
    print(json.dumps({
        "label": args.label,
        "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "cuda": torch.cuda.is_available()},
        "model": f"SmolLM2-135M-Instruct (hf: float32; vLLM CPU 0.32.0: {server_dtype('auto')}, --enable-lora)",
        "sequences": args.sequences, "new_tokens": args.new_tokens,
        "vllm_server_start_s": round(start_s, 1),
        "generation": gen,
        "grpo_step_s": steps,
        "vllm_over_hf": round(ratio, 3),
        "target_vllm_at_most_half": ratio <= 0.5,
    }, indent=1))


if __name__ == "__main__":
    main()
