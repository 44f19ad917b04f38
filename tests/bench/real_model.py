"""SmolLM2-135M-Instruct on CPU: generation speed, GRPO step time, peak RSS, and (optionally) learning.

    python tests/bench/real_model.py                      # speed only (a few minutes on 2 cores)
    python tests/bench/real_model.py --train-seconds 600  # + learning: run.toml as shipped, 600 s

Prints one JSON object. Needs the smollm2-135m alias and reasoning-gym
(docs/tasks.md). The task is examples/tasks/reasoning_gym_arithmetic:
reasoning-gym's basic_arithmetic with two one-digit terms, scored by the
dataset's score_answer on the tagged answer or the last number, plus a 0.1
format bonus for <answer> tags. The run goes into ``--db``; open it in the
TUI with ``rlab watch --db DB`` to see its curves. Figures:

- ``generation_tokens_per_s``: new tokens per second sampling 32 prompts
  at once (temperature 0.8, 64 new tokens, no early stop counted out), in
  the precision a run takes on this machine (``run_precision``: bf16 on a
  CPU with native bf16, ``engine.policy.device.uses_bf16``), through the
  adapter merged into a sampling copy (``engine.policy.sampling_weights``;
  the first call builds it, as the first sampling after each update does);
- ``generation_step_shape_tokens_per_s``: the same for what a step samples,
  8 prompts x 8 rollouts (one prefill per distinct prompt, 64 rows decoding);
  ``--both-precisions`` times the other precision too (``by_precision``).
- ``machine_at_start`` / ``load_average_at_end``: the CPU (model, AVX-512,
  native bf16), cores, threads and load: figures from two machines, or one
  under load, are not comparable.
- ``grpo_step_seconds``: one engine step of 8 prompts x 8 rollouts x 64 new
  tokens: rollouts, scoring and the LoRA (rank 16) update (num_iterations 1).
- ``run_toml_*``: the example's ``run.toml`` exactly as shipped (its task's
  24-token budget, one update per batch at lr 4e-4), as the engine runs
  it: the median ``step_seconds`` of its steps and of their rollout and
  update phases, and its rollouts' tokens per second (sampled tokens over
  ``time/generation``, which also covers rendering the prompts and building
  the trajectories). From ``--run-steps`` steps (after a held-out eval of
  the starting policy, not timed), or from the whole ``--train-seconds`` run.
- ``peak_rss_mb``: the process's peak resident memory (ru_maxrss).
- with ``--train-seconds``: the example's ``run.toml`` exactly as shipped
  (LoRA rank 16, lr 4e-4, one update per batch, 8 x 8, its held-out eval
  of 64 problems every 10 steps) trained for that many seconds: held-out
  pass@1 before and after, the eval curve and the mean reward of the
  first and last fifth of steps.
- ``sampling_*``: the sampler's mismatch with the trained policy over the
  ``run_toml_*`` steps (the mean and max of
  ``sampling/sampling_logp_difference/{mean,max}``, nats, and of the
  truncated importance weights ``sampling/importance_sampling_ratio/*``).
- ``sampler``: which path sampled (``backend``: ``hf``, rlab's loop over a
  sampling copy in ``precision``, int8 or not; ``vllm``: a vLLM server rlab
  starts, ``--backend vllm`` with ``RLAB_VLLM_PYTHON`` set or
  scripts/vllm_venv.sh's venv, serving in ``precision``). With ``vllm`` the
  hf-only speed figures (``generation_*``, ``grpo_step_*``) are not taken.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
from pathlib import Path

import torch

TASK = Path(__file__).resolve().parents[2] / "examples" / "tasks" / "reasoning_gym_arithmetic"


def isa_caps() -> dict:
    """The environment variables that cap the instruction sets torch's kernels use (set to
    stand in for a CPU without AVX-512: ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2,
    FBGEMM_ENABLE_INSTRUCTIONS=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2); empty when none is set."""
    import os

    names = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "FBGEMM_ENABLE_INSTRUCTIONS", "MKL_ENABLE_INSTRUCTIONS")
    return {name: os.environ[name] for name in names if name in os.environ}


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def measure_speed(model_dir: Path, bf16: bool, int8: bool = False) -> dict:
    from rlab.engine.run.config import RunConfig
    from rlab.engine.policy.device import training_options
    from rlab.engine.policy.lora import LoraSettings, apply_lora
    from rlab.engine.policy.model import Policy
    from rlab.engine.rewards.rubric import load_rubric
    from rlab.engine.rewards.scoring import score
    from rlab.engine.train.batch import to_batch
    from rlab.engine.rollout.play import Rollout
    from rlab.engine.train.advantages import rollout_advantages
    from rlab.engine.train.trainer import TrainConfig, Trainer
    from rlab.scenarios import get_scenario

    torch.manual_seed(0)
    task = get_scenario(str(TASK))
    policy = Policy.load(model_dir, "cpu")
    policy.model = apply_lora(policy.model, LoraSettings(rank=16))
    policy.sample_dtype = torch.bfloat16 if bf16 else None  # as a run sets it (engine.run.session.build_parts)
    policy.sample_int8 = int8
    examples = task.train_examples(0)
    prompts = [policy.render([{"role": "system", "content": task.system_prompt},
                              {"role": "user", "content": ex["prompt"]}]) for ex in examples[:32]]
    t0 = time.perf_counter()
    samples = policy.sample(prompts, max_new_tokens=64, temperature=0.8)
    gen_s = time.perf_counter() - t0
    new_tokens = sum(len(s.token_ids) for s in samples)
    t0 = time.perf_counter()
    step_samples = policy.sample([p for p in prompts[:8] for _ in range(8)], max_new_tokens=64, temperature=0.8)
    step_gen_s = time.perf_counter() - t0
    step_tokens = sum(len(s.token_ids) for s in step_samples)
    config = RunConfig(prompts_per_step=8, group_size=8, max_new_tokens=64, temperature=0.8, num_iterations=1,
                       lr=2e-4)
    rollout = Rollout(policy, task, config, tokenizer=policy.tokenizer)
    trainer = Trainer(policy.model, policy.pad_id, TrainConfig(lr=2e-4, num_iterations=1, temperature=0.8, is_cap=3.0),
                      autocast=training_options(policy.model, "cpu", bf16=bf16))
    rubric = load_rubric(task.reward_file)
    t0 = time.perf_counter()
    rollouts = rollout.play(examples[32:40])
    scored = score(rollouts, rubric)
    advantages = rollout_advantages(rollouts, scored.rewards, skip=scored.errored_groups, method="grpo",
                                    turn_rewards=scored.turn_rewards)
    batch = to_batch(rollouts, scored, advantages, 1)
    collect_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    trainer.step(batch.samples)
    train_s = time.perf_counter() - t1
    if not batch.samples:
        raise SystemExit("every group scored alike: no update to time; the task gives no spread")
    return {"generation_tokens_per_s": round(new_tokens / gen_s, 1), "generation_batch": 32,
            "generation_new_tokens": new_tokens,
            "generation_step_shape_tokens_per_s": round(step_tokens / step_gen_s, 1),
            "generation_step_shape_new_tokens": step_tokens, "grpo_step_seconds": round(collect_s + train_s, 2),
            "grpo_step_rollout_seconds": round(collect_s, 2), "grpo_step_train_seconds": round(train_s, 2),
            "grpo_step_trained_sequences": len(batch.samples),
            "grpo_step_shape": "8 prompts x 8 rollouts x 64 new tokens, LoRA rank 16"}


def sampler_path(backend: str, bf16: bool, int8: bool) -> dict:
    """Which sampler a run of this bench uses: rlab's loop over a sampling copy (its
    precision, int8 or not) or a vLLM server (the dtype rlab serves with here)."""
    if backend == "vllm":
        from rlab.engine.policy.vllm_launch import server_dtype

        return {"backend": "vllm", "precision": server_dtype("auto")}
    return {"backend": "hf", "generation": "loop", "precision": "int8" if int8 else "bf16" if bf16 else "float32"}


def run_shipped(db: Path, *, overrides: dict, **budget: float) -> tuple[dict, list[dict]]:
    """Run the example's run.toml exactly as shipped (only the run file, the
    budget, ``max_seconds`` or ``max_steps``, and the ``overrides`` of the bench's
    flags are the bench's); its summary and the metrics of its training steps."""
    from rlab.engine.run.config import RunConfig
    from rlab.engine.run.run_config import read_run_config
    from rlab.engine.step import run
    from rlab.store.reader import StoreReader

    config = RunConfig.model_validate({**read_run_config(TASK / "run.toml"), "db": db, **overrides, **budget})
    summary = run(config)
    with StoreReader(db) as reader:
        steps = [m for m in reader.step_metrics(summary["run_id"]) if "step_seconds" in m]
    return {**summary, "eval_size": config.eval_size, "rollouts_per_step": config.prompts_per_step * config.group_size}, steps


def step_figures(steps: list[dict], rollouts_per_step: int) -> dict:
    """The run.toml-shaped step: median seconds of a step and its phases, and the
    rollouts' sampled tokens per second over all the steps."""
    def median(key: str) -> float:
        return round(statistics.median(m[key] for m in steps), 2)

    sampled = sum(m["completions/mean_length"] * rollouts_per_step for m in steps)
    return {"run_toml_steps_timed": len(steps), "run_toml_step_seconds_median": median("step_seconds"),
            "run_toml_generation_seconds_median": median("time/generation"),
            "run_toml_update_seconds_median": median("time/update"),
            "run_toml_generation_tokens_per_s": round(sampled / sum(m["time/generation"] for m in steps), 1),
            "run_toml_completion_tokens_mean": round(sampled / len(steps) / rollouts_per_step, 1)}


def mismatch_figures(steps: list[dict]) -> dict:
    """The sampler against the trained policy over the steps that trained (those with
    ``sampling/*`` metrics): the mean of each step's mean |log-prob difference| (nats)
    and the largest, and the importance weights' mean and lowest (absent when the
    correction is off)."""
    def values(key: str) -> list[float]:
        return [m[key] for m in steps if m.get(key) is not None]

    out = {"sampling_steps": len(values("sampling/sampling_logp_difference/mean"))}
    for name, key, pick in (("sampling_logp_difference_mean", "sampling_logp_difference/mean", statistics.fmean),
                            ("sampling_logp_difference_max", "sampling_logp_difference/max", max),
                            ("importance_sampling_ratio_mean", "importance_sampling_ratio/mean", statistics.fmean),
                            ("importance_sampling_ratio_min", "importance_sampling_ratio/min", min)):
        if found := values(f"sampling/{key}"):
            out[name] = round(pick(found), 4)
    return out


def measure_learning(seconds: float, db: Path, overrides: dict) -> dict:
    summary, steps = run_shipped(db, overrides=overrides, max_seconds=seconds)
    rewards = [m["reward"] for m in steps if m.get("reward") is not None]
    k = max(1, len(rewards) // 5)
    return {**step_figures(steps, summary["rollouts_per_step"]), **mismatch_figures(steps), "steps": summary["steps"],
            "train_seconds": summary["seconds"],
            "eval_pass_at_1_before": summary["eval_pass_at_1_initial"],
            "eval_pass_at_1_after": summary["eval_pass_at_1_final"],
            "reward_first_steps": round(sum(rewards[:k]) / k, 4) if rewards else None,
            "reward_last_steps": round(sum(rewards[-k:]) / k, 4) if rewards else None,
            "eval_size": summary["eval_size"], "eval_curve_seconds_pass_at_1": summary["eval_curve"],
            "run_id": summary["run_id"], "db": str(db)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-seconds", type=float, default=0, help="also train this long (0: speed only)")
    parser.add_argument("--db", type=Path, default=Path("/tmp/rlab-bench-real-model.db"))
    parser.add_argument("--run-steps", type=int, default=6,
                        help="without --train-seconds: time this many steps of run.toml as shipped")
    parser.add_argument("--both-precisions", action="store_true",
                        help="on a CPU with native bf16, also time the other precision than a run's default")
    parser.add_argument("--sampler-int8", action="store_true",
                        help="sample with the int8 copy (--sampler-int8 of a run; float32 runs only)")
    parser.add_argument("--no-importance-sampling-correction", action="store_true",
                        help="the run without the truncated importance weights (the A/B of the correction)")
    parser.add_argument("--seed", type=int, default=None, help="the run's seed (default: run.toml's, else 0)")
    parser.add_argument("--backend", choices=("hf", "vllm"), default="hf",
                        help="vllm: the run samples through a vLLM server it starts (module docstring)")
    args = parser.parse_args()
    if args.backend == "vllm" and args.sampler_int8:
        parser.error("--sampler-int8 is the hf backend's sampling copy; a vLLM server samples on its own")
    overrides: dict = {"sampler_int8": True, "bf16": False} if args.sampler_int8 else {}
    if args.backend == "vllm":
        overrides["backend"] = "vllm"
    if args.no_importance_sampling_correction:
        overrides["importance_sampling_correction"] = False
    if args.seed is not None:
        overrides["seed"] = args.seed
    from rlab.engine.policy.device import describe_machine, uses_bf16
    from rlab.engine.policy.smollm2 import ensure_smollm2

    model_dir = ensure_smollm2()
    machine = describe_machine()
    from rlab.engine.policy.model import Policy

    default_bf16 = uses_bf16(Policy.load(model_dir, "cpu").model, "cpu", None) and not args.sampler_int8
    out = {"model": "smollm2-135m", "device": "cpu", "machine_at_start": machine,
           "run_precision": "bf16" if default_bf16 else "float32", "sampler_int8": args.sampler_int8,
           "sampler": sampler_path(args.backend, default_bf16, args.sampler_int8),
           "run_overrides": overrides, "cpu_isa_caps": isa_caps()}
    if args.backend == "hf":
        precisions = {"bf16" if default_bf16 else "float32": measure_speed(model_dir, default_bf16, args.sampler_int8)}
        if args.both_precisions and machine["bf16_native_cpu"]:  # the other one, side by side
            precisions["float32" if default_bf16 else "bf16"] = measure_speed(model_dir, not default_bf16)
        out |= {**precisions["bf16" if default_bf16 else "float32"], "by_precision": precisions}
    if args.train_seconds:
        out.update(measure_learning(args.train_seconds, args.db, overrides))
    else:
        summary, steps = run_shipped(args.db, overrides=overrides, max_steps=args.run_steps)
        out.update({**step_figures(steps, summary["rollouts_per_step"]), **mismatch_figures(steps)})
    out["peak_rss_mb"] = round(_peak_rss_mb(), 1)
    out["load_average_at_end"] = describe_machine()["load_average"]
    print(json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
