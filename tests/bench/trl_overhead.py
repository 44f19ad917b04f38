"""What the lab's TRL attachment costs a GRPOTrainer step: the same run with and without it.

    torchrun --standalone --nproc_per_node 2 tests/bench/trl_overhead.py [--steps 30] [--repeats 3]
    python tests/bench/trl_overhead.py            # one process
    accelerate launch tests/bench/trl_overhead.py --model smollm2-135m --gpu \\
        --lora-rank 16 --completion-tokens 128 --generations 8   # a GPU box (docs/gpu.md)

In one launch, GRPOTrainer trains the same job (the tiny policy, random
weights, CPU; same seed, 2 prompts x 4 completions of up to 6 tokens per
step on two processes) ``--repeats`` times without and with
``RlabCallback`` (alternating off, on, off, on, ... so machine noise hits
both alike). A step's time is the wall time (and this process's CPU
time) from one ``on_step_begin`` to the next: generation, rewards, update, every callback's ``on_step_end``
and the logging, the attachment's reward slots, its SQLite writes, its
command poll and its broadcast included. The first ``--warmup`` steps of
each training are left out. Also timed directly: the seconds the main
process spends inside the callback's ``on_step_end`` and ``on_log``.

Prints JSON (main process): per arm the median and mean step seconds, the
overhead ``on / off - 1`` of the medians and of the means and of each
repeat's pair (on a busy machine the wall-clock noise is larger than the
cost), and the callback's own seconds per step on the main process and
their share of a step without it (the direct figure: on several processes
it includes waiting in the broadcast for the slowest process).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def build_model(folder: Path) -> Path:
    """The tiny policy with random weights (as tests/conftest.py's raw_tiny_model_dir)."""
    import torch
    from transformers import LlamaForCausalLM

    from rlab.engine.policy.tiny import build_config, build_tokenizer

    torch.manual_seed(0)
    tokenizer = build_tokenizer()
    LlamaForCausalLM(build_config(len(tokenizer))).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def train(model: Path, out: Path, steps: int, db: Path | None, options: argparse.Namespace
          ) -> tuple[list[float], list[float], float, int]:
    """One training; (wall seconds of each step, CPU seconds of this process in each step,
    wall seconds inside the callback, rank)."""
    import random

    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlab.engine.integrations.trl import RlabCallback
    from trl_attach_script import brief, correct

    rng = random.Random(0)
    pairs = [(rng.randint(0, 9), rng.randint(0, 9)) for _ in range(64)]
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"{a}+{b}="}], "answer": str(a + b)}
                                 for a, b in pairs])
    config = GRPOConfig(
        output_dir=str(out), max_steps=steps, per_device_train_batch_size=options.generations,
        num_generations=options.generations, max_completion_length=options.completion_tokens,
        learning_rate=1e-5, logging_steps=1, num_completions_to_print=0, save_strategy="no", report_to="none",
        use_cpu=not options.gpu, bf16=options.gpu, seed=0, temperature=1.0, beta=0.0, dataloader_num_workers=0,
        disable_tqdm=True)
    peft_config = None
    if options.lora_rank:
        from peft import LoraConfig

        peft_config = LoraConfig(r=options.lora_rank, lora_alpha=2 * options.lora_rank, target_modules="all-linear",
                                 task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=str(model), reward_funcs=[correct, brief], args=config, train_dataset=dataset,
                          peft_config=peft_config)
    begins: list[tuple[float, float]] = []
    inside = [0.0]

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            begins.append((time.perf_counter(), time.process_time()))

        def on_train_end(self, args, state, control, **kwargs):
            begins.append((time.perf_counter(), time.process_time()))

    class Timed(RlabCallback):
        def on_step_end(self, *args, **kwargs):
            t0 = time.perf_counter()
            try:
                return super().on_step_end(*args, **kwargs)
            finally:
                inside[0] += time.perf_counter() - t0

        def on_log(self, *args, **kwargs):
            t0 = time.perf_counter()
            try:
                return super().on_log(*args, **kwargs)
            finally:
                inside[0] += time.perf_counter() - t0

    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # keep stdout for the JSON
    trainer.add_callback(Clock())
    if db is not None:
        trainer.add_callback(Timed(db, trainer=trainer, success="correct"))
    trainer.train()
    wall = [b[0] - a[0] for a, b in zip(begins, begins[1:])]
    cpu = [b[1] - a[1] for a, b in zip(begins, begins[1:])]
    return wall, cpu, inside[0], trainer.accelerator.process_index


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3, help="steps of each training left out")
    parser.add_argument("--model", type=Path,
                        help="model directory or smollm2-135m (default: a fresh tiny policy)")
    parser.add_argument("--gpu", action="store_true", help="train on the GPU (bf16) instead of the CPU")
    parser.add_argument("--lora-rank", type=int, default=0, help="train a LoRA adapter of this rank (0: full)")
    parser.add_argument("--completion-tokens", type=int, default=6, help="max_completion_length")
    parser.add_argument("--generations", type=int, default=4,
                        help="num_generations, and completions per process per step")
    args = parser.parse_args()
    import torch.distributed as dist

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model is not None:
            from rlab.engine.policy.smollm2 import resolve_model

            model = resolve_model(model)  # the smollm2-135m alias: converted once into the cache
        else:  # each process builds the same one (same seed) in its own folder
            model = build_model(Path(tmp) / "model")
        arms: dict[str, list[float]] = {"off": [], "on": []}
        cpu: dict[str, list[float]] = {"off": [], "on": []}
        pairs: list[float] = []
        inside, processes = 0.0, 1
        for repeat in range(args.repeats):
            medians = {}
            for arm in ("off", "on"):
                db = Path(tmp) / "runs.db" if arm == "on" else None
                seconds, cpu_seconds, spent, rank = train(model, Path(tmp) / f"out-{arm}-{repeat}", args.steps,
                                                          db, args)
                arms[arm] += seconds[args.warmup:]
                cpu[arm] += cpu_seconds[args.warmup:]
                medians[arm] = statistics.median(seconds[args.warmup:])
                inside += spent
                processes = dist.get_world_size() if dist.is_initialized() else 1
            pairs.append(round(medians["on"] / medians["off"] - 1, 4))
        if rank != 0:
            return
        report: dict[str, object] = {"processes": processes, "model": str(args.model or "tiny (random)"),
                                     "device": "cuda" if args.gpu else "cpu", "lora_rank": args.lora_rank,
                                     "completion_tokens": args.completion_tokens,
                                     "generations": args.generations, "steps_per_training": args.steps,
                                     "repeats": args.repeats, "warmup_left_out": args.warmup}
        for arm, values in arms.items():
            report[arm] = {"steps": len(values), "median_s": round(statistics.median(values), 4),
                           "mean_s": round(statistics.fmean(values), 4)}
        off, on = report["off"], report["on"]
        report["overhead_median"] = round(on["median_s"] / off["median_s"] - 1, 4)  # type: ignore[index]
        report["overhead_mean"] = round(on["mean_s"] / off["mean_s"] - 1, 4)  # type: ignore[index]
        report["cpu_median_s"] = {arm: round(statistics.median(v), 4) for arm, v in cpu.items()}
        report["cpu_overhead_median"] = round(statistics.median(cpu["on"]) / statistics.median(cpu["off"]) - 1, 4)
        report["overhead_per_repeat"] = pairs  # on/off - 1 of each pair's medians: the noise shows here
        report["callback_s_per_step_main_process"] = round(inside / (args.steps * args.repeats), 5)
        report["callback_share_of_step"] = round(report["callback_s_per_step_main_process"]  # type: ignore[operator]
                                                 / off["median_s"], 4)  # type: ignore[index]
        print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
