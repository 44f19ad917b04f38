"""Peer benchmark: TRL's GRPOTrainer and rlab side by side, in one process.

    pip install -e ".[bench]"          # trl
    python tests/bench/peer_trl.py [--steps 60] [--eval-every 10] [--threads N]

Both start from the shipped tiny policy (engine/policy/embedded/) and train
on the arithmetic train split with the same group size (8), prompts per step
(32, so 256 rollouts per step), completion budget, temperature, learning
rate, updates per batch (``num_iterations``), clip epsilon, KL weight (0),
loss normalisation (token mean; rlab's default leaves the tokens of groups
without reward spread out of the mean, TRL's ``dapo`` counts them, so on a
step where few groups have spread rlab's update is the larger;
``--loss-tokens all`` makes rlab's TRL's, see engine/train/trainer.py)
and std-scaled group advantages; TRL's gradient checkpointing is switched
off, as rlab's is by default; both warm the learning rate up over rlab's ``lr_warmup_steps``
and decay it linearly (TRL to 0, rlab to ``lr_final_ratio``). Each trainer
runs ``--steps`` steps; every ``--eval-every`` steps
the held-out greedy pass@1 on the 500 held-out problems is measured with
rlab's evaluation code on the trainer's current weights (time spent in it
is not counted as training time).

Prints one JSON object: per trainer the median seconds per step (wall, eval
excluded), the held-out pass@1 curve as ``[[training_seconds, pass_at_1],
...]`` and the training seconds at which it first reached ``--target``
(None if never); and the ratio rlab / TRL of the median step times.
Timings are wall clock: on a shared machine read the ratio, taken in one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import get_args

# tests/bench/store.py and tui.py would shadow the packages of the same name.
ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

import torch  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

from rlab.engine.config import LossTokens, RunConfig  # noqa: E402
from rlab.engine.policy.model import Policy  # noqa: E402
from rlab.engine.policy.tiny import embedded_dir  # noqa: E402
from rlab.engine.rewards.rubric import load_rubric  # noqa: E402
from rlab.engine.rollout.play import Rollout  # noqa: E402
from rlab.engine.success import SuccessRule  # noqa: E402
from rlab.scenarios import get_scenario  # noqa: E402


class HeldOut:
    """Held-out greedy pass@1 of a model, with rlab's evaluation code."""

    def __init__(self, config: RunConfig):
        self.scenario = get_scenario(config.scenario)
        self.examples = self.scenario.eval_examples()
        self.rubric = load_rubric(self.scenario.reward_file)
        self.config = config

    def __call__(self, model, tokenizer) -> float:
        policy = Policy(model, tokenizer, "cpu")
        score = Rollout(policy, self.scenario, self.config).evaluate(self.examples, self.rubric,
                                                                     SuccessRule.of(self.scenario)).pass_at_1
        model.train()
        return score


def first_reached(curve: list[list[float]], target: float) -> float | None:
    """Training seconds of the first point of ``curve`` at or above ``target``."""
    return next((t for t, score in curve if score >= target), None)


def run_rlab(config: RunConfig) -> dict:
    """rlab's own loop (engine.step), store on, as ``rlab run --headless``."""
    from rlab.engine.step import run
    from rlab.store.reader import StoreReader

    summary = run(config)
    rows = StoreReader(config.db).step_metrics(summary["run_id"])
    step_s = [row["step_seconds"] for row in rows if row.get("step_seconds") is not None]
    return {"median_step_seconds": statistics.median(step_s), "steps": len(step_s),
            "curve": summary["eval_curve"]}


def run_trl(config: RunConfig, held_out: HeldOut, out_dir: Path) -> dict:
    """TRL's GRPOTrainer with the same settings; a callback times steps and evaluates."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    scenario = get_scenario(config.scenario)
    rubric = load_rubric(scenario.reward_file)
    policy = Policy.load(embedded_dir("arithmetic"), "cpu")
    # The tiny chat template renders a user message as its content alone, so
    # plain-text prompts give TRL exactly the token ids rlab samples from.
    train = Dataset.from_list([{"prompt": ex["prompt"], "answer": ex["answer"], "id": ex["id"]}
                               for ex in scenario.train_examples(config.seed)])

    def reward(prompts, completions, answer, id, **_):
        examples = [{"prompt": p, "answer": a, "id": i} for p, a, i in zip(prompts, answer, id)]
        return [s.reward for s in rubric.score_group(examples, completions)]

    args = GRPOConfig(
        output_dir=str(out_dir), max_steps=config.max_steps, learning_rate=config.lr,
        per_device_train_batch_size=config.prompts_per_step * config.group_size,
        num_generations=config.group_size, max_completion_length=config.max_new_tokens,
        temperature=config.temperature, num_iterations=config.num_iterations, epsilon=config.clip_eps,
        beta=config.beta, max_grad_norm=config.max_grad_norm, loss_type="dapo", scale_rewards="group",
        warmup_steps=config.lr_warmup_steps, lr_scheduler_type="linear",
        gradient_checkpointing=False, use_cpu=True, bf16=False, report_to="none", save_strategy="no",
        logging_steps=10_000, disable_tqdm=True, seed=config.seed, dataloader_num_workers=0,
    )
    timer = _StepTimer(held_out, policy.tokenizer, config.eval_every)
    trainer = GRPOTrainer(model=policy.model, reward_funcs=reward, args=args, train_dataset=train,
                          processing_class=policy.tokenizer, callbacks=[timer])
    timer.curve.append([0.0, held_out(trainer.model, policy.tokenizer)])
    trainer.train()
    return {"median_step_seconds": statistics.median(timer.step_seconds), "steps": len(timer.step_seconds),
            "curve": timer.curve}


class _StepTimer(TrainerCallback):
    """Wall seconds per optimizer step; held-out eval every ``every`` steps (not timed)."""

    def __init__(self, held_out: HeldOut, tokenizer, every: int):
        self.held_out, self.tokenizer, self.every = held_out, tokenizer, every
        self.step_seconds: list[float] = []
        self.curve: list[list[float]] = []
        self.trained = 0.0
        self.began = 0.0

    def on_step_begin(self, args, state, control, model=None, **kwargs):
        self.began = time.perf_counter()

    def on_step_end(self, args, state, control, model=None, **kwargs):
        seconds = time.perf_counter() - self.began
        self.step_seconds.append(seconds)
        self.trained += seconds
        if state.global_step % self.every == 0 or state.global_step == args.max_steps:
            self.curve.append([round(self.trained, 2), self.held_out(model, self.tokenizer)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="steps per trainer (>= 50 for the medians)")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--only", choices=["rlab", "trl"], default=None, help="run one trainer only")
    parser.add_argument("--num-iterations", type=int, default=1,
                        help="updates per batch for both (default 1: with more, TRL counts each update as a step)")
    parser.add_argument("--lr", type=float, default=None, help="learning rate for both (default: rlab's)")
    parser.add_argument("--loss-tokens", choices=get_args(LossTokens),
                        default=RunConfig.model_fields["loss_tokens"].default,
                        help="rlab's loss mean: over tokens with signal (its default) or all (TRL's dapo)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        # lr_decay_steps = steps: both schedules decay over the whole run, as TRL's does.
        config = RunConfig(max_steps=args.steps, lr_decay_steps=args.steps, eval_every=args.eval_every,
                           checkpoint_every=10**6,
                           db=Path(tmp) / "peer.db", num_iterations=args.num_iterations,
                           loss_tokens=args.loss_tokens,
                           **({"lr": args.lr} if args.lr else {}))
        if args.only != "trl":
            torch.manual_seed(config.seed)
            results["rlab"] = run_rlab(config)
        if args.only != "rlab":
            torch.manual_seed(config.seed)
            results["trl"] = run_trl(config, HeldOut(config), Path(tmp) / "trl")
    for result in results.values():
        result[f"first_reached_{args.target}_s"] = first_reached(result["curve"], args.target)
    shared = {"steps": args.steps, "prompts_per_step": config.prompts_per_step, "group_size": config.group_size,
              "max_new_tokens": config.max_new_tokens, "temperature": config.temperature, "lr": config.lr,
              "num_iterations": config.num_iterations, "rlab_loss_tokens": config.loss_tokens,
              "torch_threads": torch.get_num_threads()}
    if len(results) == 2:
        shared["step_seconds_ratio_rlab_over_trl"] = round(
            results["rlab"]["median_step_seconds"] / results["trl"]["median_step_seconds"], 3)
    print(json.dumps({"settings": shared, **results}))


if __name__ == "__main__":
    main()
