"""Peer benchmark: rlab and TRL's GRPOTrainer, same model, task, batch and device, one after the other.

    pip install -e ".[bench]"                      # trl
    python tests/bench/peer_trl.py                 # the shipped tiny policy on arithmetic (CPU)
    python tests/bench/peer_trl.py --model smollm2-135m --task examples/tasks/reasoning_gym_arithmetic \\
        --lora-rank 16 --max-new-tokens 24 --steps 6  # SmolLM2 on reasoning-gym (pip install -e ".[tasks]")

Each trainer runs in a child process of its own (so each one's peak memory
is its own), from the same weights and seed, for ``--steps`` rollout batches
of ``--prompts-per-step`` x ``--group-size`` completions of at most
``--max-new-tokens`` tokens, with ``--num-iterations`` updates per batch
(GRPO's mu: TRL reuses a batch for that many optimizer steps, rlab runs
that many updates per step), the same learning rate held constant, sampling
temperature, clip epsilon (0.2), no KL term, std-scaled group advantages,
LoRA of ``--lora-rank`` on q/k/v/o (alpha 2 x rank; 0: every weight), no
gradient checkpointing, and the same precision: ``--bf16``/``--no-bf16``, by
default rlab's rule (``engine.policy.device.uses_bf16``: bf16 on a GPU with
it, and on a CPU with native bf16 for a model of 50 M parameters or more),
which both trainers apply to the model they load. rlab's loss averages over every trained token here (``--loss-tokens
all``, TRL's ``loss_type="dapo"``), so both make the same update.

Timing is per rollout batch (generation, scoring and every update on it),
the median after the first batch (warm-up). Held-out greedy pass@1 on the
first ``--eval-size`` held-out examples is measured with rlab's evaluation
code on each trainer's current weights every ``--eval-every`` batches (not
counted as training time). Prints one JSON object: per trainer the median
seconds per rollout batch and of its phases (``generation``: sampling and
scoring; ``update``: the rest), the peak memory (CUDA: the most allocated;
CPU: the process's peak resident set), the held-out curve as
``[[seconds_of_training, pass_at_1], ...]``, and the ratio rlab / TRL.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# tests/bench/store.py and tui.py would shadow the packages of the same name.
ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

import torch  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

from rlab.engine.run.config import RunConfig  # noqa: E402
from rlab.engine.policy.device import clock, describe_machine, uses_bf16  # noqa: E402
from rlab.engine.policy.model import Policy  # noqa: E402
from rlab.engine.policy.smollm2 import resolve_model  # noqa: E402
from rlab.engine.policy.tiny import embedded_dir  # noqa: E402
from rlab.engine.rewards.rubric import load_rubric  # noqa: E402
from rlab.engine.rollout.play import Rollout, user_messages  # noqa: E402
from rlab.engine.rewards.success import SuccessRule  # noqa: E402
from rlab.scenarios import load_scenario  # noqa: E402


def settings(args: argparse.Namespace) -> RunConfig:
    """The run both trainers share, as an rlab RunConfig."""
    return RunConfig.model_validate({
        "model": args.model or embedded_dir("arithmetic"), "task": args.task, "device": args.device,
        "lora_rank": args.lora_rank, "max_new_tokens": args.max_new_tokens,
        "prompts_per_step": args.prompts_per_step, "group_size": args.group_size, "max_steps": args.steps,
        "num_iterations": args.num_iterations, "lr": args.lr, "lr_warmup_steps": 0, "lr_final_ratio": 1.0,
        "temperature": args.temperature, "eval_size": args.eval_size, "eval_every": args.eval_every,
        "checkpoint_every": 10**6, "loss_tokens": "all", "generation": args.generation, "seed": args.seed,
        "threads": args.threads, "bf16": args.bf16, "alerts": {"pause_on": ""}})


def peak_memory_gb(device: str) -> float:
    """The most this process held: CUDA's peak allocation, else the peak resident set (GB, 1e9 bytes)."""
    if torch.device(device).type == "cuda":
        return torch.cuda.max_memory_allocated() / 1e9
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # Linux reports KiB


def summarise(batch_s: list[float], generation_s: list[float], curve: list[list[float]], device: str) -> dict:
    """Medians after the first (warm-up) batch, the peak memory and the held-out curve."""
    def median(values: list[float]) -> float | None:
        kept = values[1:] or values
        return round(statistics.median(kept), 3) if kept else None

    return {"seconds_per_rollout_batch": median(batch_s), "batches": len(batch_s),
            "phases": {"generation": median(generation_s),
                       "update": median([b - g for b, g in zip(batch_s, generation_s)])},
            "peak_memory_gb": round(peak_memory_gb(device), 3), "curve": curve}


def run_rlab(config: RunConfig) -> dict:
    """rlab's own loop (``engine.step``), as ``rlab run --headless``; a run file in a temporary folder."""
    from rlab.engine.step import run
    from rlab.store.reader import StoreReader

    with tempfile.TemporaryDirectory() as tmp:
        summary = run(config.model_copy(update={"db": Path(tmp) / "peer.db"}))
        rows = [r for r in StoreReader(Path(tmp) / "peer.db").step_metrics(summary["run_id"])
                if r.get("step_seconds") is not None]
    device = config.device or "cpu"
    return summarise([r["step_seconds"] for r in rows],
                     [r["time/generation"] + r["time/scoring"] for r in rows], summary["eval_curve"], device)


class HeldOut:
    """Held-out greedy pass@1 of a trainer's model, with rlab's evaluation code."""

    def __init__(self, config: RunConfig):
        self.scenario = load_scenario(config.scenario, config.task)
        self.examples = self.scenario.eval_examples()[:config.eval_size]
        self.rubric = load_rubric(self.scenario.reward_file)
        self.config = config

    def __call__(self, model, tokenizer) -> float:
        model.eval()
        policy = Policy(model, tokenizer, str(next(model.parameters()).device))
        score = Rollout(policy, self.scenario, self.config).evaluate(
            self.examples, self.rubric, SuccessRule.of(self.scenario)).pass_at_1
        model.train()
        return score


def run_trl(config: RunConfig) -> dict:
    """TRL's GRPOTrainer with the same settings; its generation is timed by wrapping the
    method that generates and scores, each rollout batch by a callback."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    device = config.device or "cpu"
    scenario = load_scenario(config.scenario, config.task)
    rubric = load_rubric(scenario.reward_file)
    path = resolve_model(Path(config.model)) if config.model else embedded_dir("arithmetic")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    rows = [{"prompt": user_messages(ex, scenario.system_prompt), "example": json.dumps(ex)}
            for ex in scenario.train_examples(config.seed)]

    def reward(prompts, completions, example, **_):
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [s.reward for s in rubric.score_group([json.loads(e) for e in example], texts)]

    bf16 = uses_bf16(model, device, config.bf16)
    with tempfile.TemporaryDirectory() as tmp:
        args = GRPOConfig(
            output_dir=tmp, max_steps=config.max_steps * config.num_iterations, learning_rate=config.lr,
            lr_scheduler_type="constant", warmup_steps=0,
            per_device_train_batch_size=config.prompts_per_step * config.group_size,
            num_generations=config.group_size, max_completion_length=config.max_new_tokens,
            temperature=config.temperature, top_p=1.0, num_iterations=config.num_iterations, epsilon=config.clip_eps,
            beta=0.0, max_grad_norm=config.max_grad_norm, loss_type="dapo", scale_rewards="group",
            gradient_checkpointing=False, use_cpu=torch.device(device).type == "cpu", bf16=bf16,
            report_to="none", save_strategy="no", logging_steps=10**6, disable_tqdm=True, seed=config.seed,
            dataloader_num_workers=0)
        peft = (LoraConfig(r=config.lora_rank, lora_alpha=2 * config.lora_rank, lora_dropout=0.0,
                           target_modules=list(config.lora_targets), task_type="CAUSAL_LM")
                if config.lora_rank else None)
        timer = _BatchTimer(HeldOut(config), tokenizer, config, device)
        trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=Dataset.from_list(rows),
                              processing_class=tokenizer, peft_config=peft, callbacks=[timer])
        generate = trainer._generate_and_score_completions

        def timed(*a, **kw):
            start = clock(device)
            out = generate(*a, **kw)
            timer.generation_s.append(clock(device) - start)
            return out

        trainer._generate_and_score_completions = timed
        timer.curve.append([0.0, timer.held_out(trainer.model, tokenizer)])
        trainer.train()
    return summarise(timer.batch_s, timer.generation_s, timer.curve, device)


class _BatchTimer(TrainerCallback):
    """Wall seconds per rollout batch (``num_iterations`` optimizer steps); held-out evals between."""

    def __init__(self, held_out: HeldOut, tokenizer, config: RunConfig, device: str):
        self.held_out, self.tokenizer, self.config, self.device = held_out, tokenizer, config, device
        self.batch_s: list[float] = []
        self.generation_s: list[float] = []
        self.curve: list[list[float]] = []
        self.trained = 0.0
        self.began = 0.0

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step % self.config.num_iterations == 0:
            self.began = clock(self.device)

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if state.global_step % self.config.num_iterations:
            return
        seconds = clock(self.device) - self.began
        self.batch_s.append(seconds)
        self.trained += seconds
        batch = state.global_step // self.config.num_iterations
        if batch % self.config.eval_every == 0 or batch == self.config.max_steps:
            self.curve.append([round(self.trained, 2), self.held_out(model, self.tokenizer)])


def parser() -> argparse.ArgumentParser:
    """The bench's options (the settings both trainers share)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="a model directory or smollm2-135m (default: the shipped tiny policy)")
    p.add_argument("--task", help="a task.toml folder or reasoning-gym:NAME (default: the arithmetic scenario)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--lora-rank", type=int, default=0, help="LoRA rank (0: every weight trains)")
    p.add_argument("--max-new-tokens", type=int, default=6)
    p.add_argument("--prompts-per-step", type=int, default=8)
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--steps", type=int, default=6, help="rollout batches per trainer")
    p.add_argument("--num-iterations", type=int, default=2, help="updates per rollout batch (GRPO's mu)")
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--eval-size", type=int, default=64)
    p.add_argument("--eval-every", type=int, default=3, help="rollout batches between held-out evals")
    p.add_argument("--generation", choices=["loop", "hf_static"], default="loop", help="rlab's sampler")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: one per core)")
    p.add_argument("--bf16", action=argparse.BooleanOptionalAction, default=None,
                   help="both trainers in bf16 (default: rlab's rule, uses_bf16)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", choices=["rlab", "trl"], help="run one trainer, in this process")
    return p


def main() -> None:
    args = parser().parse_args()
    if args.bf16 is None and not args.only:  # one decision, passed to both children
        path = resolve_model(Path(args.model)) if args.model else embedded_dir("arithmetic")
        args.bf16 = uses_bf16(Policy.load(path, args.device).model, args.device, None)
    if args.threads is None and not args.only:  # torch's default for both, not rlab's own (a core fewer)
        args.threads = torch.get_num_threads()
    config = settings(args)
    if args.only:
        torch.manual_seed(args.seed)
        if args.threads:
            torch.set_num_threads(args.threads)
        result = run_rlab(config) if args.only == "rlab" else run_trl(config)
        print(json.dumps(result))
        return
    results = {}
    for trainer in ("rlab", "trl"):
        precision = "--bf16" if args.bf16 else "--no-bf16"
        child = subprocess.run([sys.executable, __file__, *sys.argv[1:], precision, "--threads", str(args.threads),
                                "--only", trainer],
                               check=False, capture_output=True, text=True)
        if child.returncode != 0:
            raise SystemExit(f"{trainer} failed:\n{child.stderr[-4000:]}")
        results[trainer] = json.loads(child.stdout.strip().splitlines()[-1])
    shared = {k: v for k, v in vars(args).items() if k != "only"} | {
        "device_name": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"), "machine": describe_machine()}
    ratio = None
    if results["rlab"]["seconds_per_rollout_batch"] and results["trl"]["seconds_per_rollout_batch"]:
        ratio = round(results["rlab"]["seconds_per_rollout_batch"] / results["trl"]["seconds_per_rollout_batch"], 3)
    print(json.dumps({"settings": shared, **results, "seconds_per_batch_ratio_rlab_over_trl": ratio}))


if __name__ == "__main__":
    main()
