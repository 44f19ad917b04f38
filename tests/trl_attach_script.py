"""A GRPO training script of the usual TRL shape, with the lab attached in one line.

Test-only (tests/test_trl_attach_live.py) and the demo of issue 31: run it
on two CPU processes (gloo) and steer it from another terminal:

    .venv/bin/torchrun --standalone --nproc_per_node 2 tests/trl_attach_script.py \\
        --out /tmp/grpo-out --db /tmp/runs.db --steps 300
    rlab watch --db /tmp/runs.db                        # the TUI: space pauses, e edits, n steps
    rlab pause grpo-out-trl --db /tmp/runs.db
    rlab reward grpo-out-trl tests/fixtures/trl_attach/rewards_v2.py --db /tmp/runs.db
    rlab resume grpo-out-trl --db /tmp/runs.db

Everything but the ``RlabCallback`` line is plain TRL: a dataset with a
``prompt`` and an ``answer`` column, two reward functions in TRL's form,
GRPOConfig, GRPOTrainer. ``--trace DIR`` (tests) makes each process note the
step it is about to run and its pid in ``DIR/rank{N}``, so a test can see
that no process runs ahead of a pause, and kill one; and, at each step's
end, the step and the learning rate its optimizer holds for the next update
in ``DIR/lr{N}`` (one line a step), so a test can see an ``rlab set lr=``
reach every process.
"""

from __future__ import annotations

import argparse
import os
import random
import re
from pathlib import Path

ANSWER = re.compile(r"-?\d+")


def correct(completions, answer, **kwargs) -> list[float]:
    """1.0 when the completion's first number is the answer."""
    out = []
    for completion, expected in zip(completions, answer):
        found = ANSWER.search(completion[0]["content"])
        out.append(float(found is not None and found.group() == expected))
    return out


def brief(completions, **kwargs) -> list[float]:
    """1.0 for at most 3 characters (an answer and nothing else)."""
    return [float(len(c[0]["content"].strip()) <= 3) for c in completions]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path,
                        help="model directory (default: the tiny policy with random weights, built here)")
    parser.add_argument("--out", type=Path, required=True, help="TRL output_dir")
    parser.add_argument("--db", type=Path, help="the rlab run file (no callback without it)")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--trace", type=Path, help="tests: note each process's next step in DIR/rank{N}")
    parser.add_argument("--judge-url", help="tests: add a RULER judge at this OpenAI-compatible URL")
    parser.add_argument("--log-completions", action="store_true", help="TRL's completions Parquet files too")
    parser.add_argument("--gpu", action="store_true", help="train on the GPUs (bf16) instead of the CPU")
    args = parser.parse_args(argv)

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    rng = random.Random(0)
    pairs = [(rng.randint(0, 9), rng.randint(0, 9)) for _ in range(64)]
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": f"{a}+{b}="}], "answer": str(a + b)}
                                 for a, b in pairs])
    config = GRPOConfig(
        output_dir=str(args.out), max_steps=args.steps, per_device_train_batch_size=4, num_generations=4,
        max_completion_length=6, learning_rate=1e-5, logging_steps=1, log_completions=args.log_completions,
        num_completions_to_print=0, save_strategy="no", report_to="none", use_cpu=not args.gpu, bf16=args.gpu,
        seed=0, temperature=1.0, beta=0.0, dataloader_num_workers=0, disable_tqdm=True,
        ddp_timeout=120)  # a lost peer ends a collective within 2 minutes (a pause does not: it beats every second)
    model = args.model
    if model is None:
        model = args.out / "tiny-model"
        # Once the process group is up, transformers saves a model on rank 0
        # only: the first process of each machine builds it, the others wait
        # for it (transformers' idiom for work done once).
        with config.main_process_first(desc="the tiny policy"):
            if config.local_process_index == 0:
                _tiny_model(model)
    trainer = GRPOTrainer(model=str(model), reward_funcs=[correct, brief], args=config, train_dataset=dataset)

    if args.db is not None:
        from rlab.engine.integrations.trl import RlabCallback

        judge = None
        if args.judge_url:
            from rlab.engine.run.config import JudgeSettings

            judge = JudgeSettings(model="judge", base_url=args.judge_url, use_cache=False, max_retries=0)
        trainer.add_callback(RlabCallback(args.db, trainer=trainer, success="correct", judge=judge))
    if args.trace is not None:
        trainer.add_callback(_Trace(args.trace, trainer))
    trainer.train()


def _tiny_model(folder: Path) -> None:
    """Save the tiny policy with random weights (seeded: the same every run) in ``folder``."""
    import torch
    from transformers import LlamaForCausalLM

    from rlab.engine.policy.tiny import build_config, build_tokenizer

    torch.manual_seed(0)
    tokenizer = build_tokenizer()
    LlamaForCausalLM(build_config(len(tokenizer))).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def _Trace(folder: Path, trainer):
    """A callback writing the step each process is about to run, and at each step's end
    (after the lab's callback, added before it) its optimizer's learning rate (tests only)."""
    from transformers import TrainerCallback

    folder.mkdir(parents=True, exist_ok=True)
    rank = trainer.accelerator.process_index

    class Trace(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            (folder / f"rank{rank}").write_text(f"{state.global_step + 1} {os.getpid()}")

        def on_step_end(self, args, state, control, **kwargs):
            with open(folder / f"lr{rank}", "a") as lines:
                lines.write(f"{state.global_step} {trainer.optimizer.param_groups[0]['lr']!r}\n")

    return Trace()


if __name__ == "__main__":
    main()
