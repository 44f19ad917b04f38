"""Multi-step benchmarks: step speed (one sequence per episode vs one sample per turn)
and GiGPO vs GRPO learning curves. Both print JSON.

    python tests/bench/multistep.py speed [--scenario number_guess] [--untrained] [--repeats 3]
                                          [--prompts-per-step 8]
    python tests/bench/multistep.py curves [--scenario maze_loose] [--seeds 0 1 2] [--max-steps 300]
                                           [--methods gigpo grpo dr_grpo] [--max-seconds 0]
                                           [--gigpo-mode mean_norm] [--loss-tokens with_signal]
                                           [--db runs.db] [--parallel 2] [--settings SWEEP.json]
                                           [--success-level 0.5] [--model DIR]
    python tests/bench/multistep.py sweep [--scenario frozenlake] [--seeds 100] [--max-steps 100]
                                          [--lrs 1e-4 3e-4 1e-3] [--omegas 0.5 1 2] [--tail 40]

``speed`` times one number_guess step side by side in one process: the
rollout with every turn re-running its whole conversation (the engine before
issue 16) and with each turn extending the last turn's KV cache
(``engine.policy.sampling.PrefixCache``, the default), alternated; then, on
the same rollouts, the update with each turn its own trainer sample with its
whole context (``--train-unit turn``, before issue 16) and with each episode
one sequence, observations masked out (the default). The policy and
rubric are the ones ``rlab run --scenario number_guess`` trains: the
warm-started tiny policy (built once, minutes; cached) and the ``solved``
rubric. ``--untrained`` takes an untrained tiny model and a rubric that
rewards valid guesses instead: random guessing plays all 6 turns, and where
it samples tokens the chat template renders differently next turn, an
episode splits into several samples and the turn cache misses.

``curves`` runs the headless engine once per method and seed (same seeds for
every method; 300 steps per run, a step budget that no machine's speed
changes; ``--max-seconds S`` adds a time budget, and then the learning rate
decays over whichever ends first, so the curves depend on the machine) on
one tiny policy warm-started for the scenario (seed 0), all into one run
file, so ``rlab`` shows any two of them in its runs compare screen. The
default scenario is ``maze_loose``, where sampled walks soon all arrive and
only GiGPO's step-level advantage still ranks moves; ``maze_loose_strict``
trains the same way and holds out greedy walks with two moves beyond the
shortest, so a walk that arrives only after bumping fails. It prints, per method,
the held-out greedy success curve of every seed (step, success), the first
eval at 1.0, and the mean and spread (min, max, std) over seeds of the final
success and of the success averaged over the evals (the area under the
curve). ``train_seconds`` says whether a run kept to the issue's 10 minutes.
Timings are wall-clock seconds of whatever else the machine was doing: say
"measured under load" when it was. Per method it also gives the mean
held-out curve, the steps to ``--success-level`` (the first eval at or above
it), the share of groups with no reward spread (``frac_reward_zero_std``),
the share of turns in an anchor group of more than one turn, and each run's
sampled success on the training levels over the last ``--tail`` steps.

``sweep`` picks each method's learning rate (and GiGPO's omega, tried at its
best learning rate) on the training levels only: a setting's score is the
sampled success of its runs over the last ``--tail`` steps; the held-out
split is never read. ``curves --settings SWEEP.json`` then runs every
method at the settings its sweep chose (issue 32: ``frozenlake`` and
``sokoban``, environments nobody here designed). No alert pauses a bench
run (``--alert pause_on=``): nobody is there to resume it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import get_args

# tests/bench/store.py and tui.py would shadow the packages of the same name.
ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

import torch  # noqa: E402
from transformers import LlamaForCausalLM  # noqa: E402

from rlab.engine.run.config import LossTokens, RunConfig  # noqa: E402
from rlab.engine.policy.tiny import build_config, build_tokenizer  # noqa: E402
from rlab.engine.train.warm_start import ensure_tiny_model  # noqa: E402
from rlab.engine.rewards.rubric import load_rubric  # noqa: E402
from rlab.engine.rewards.scoring import score  # noqa: E402
from rlab.engine.run.session import start  # noqa: E402
from rlab.engine.train.advantages import rollout_advantages  # noqa: E402
from rlab.engine.train.batch import to_batch  # noqa: E402
from rlab.engine.train.trainer import TrainConfig, Trainer  # noqa: E402
from rlab.engine.types import Rollouts  # noqa: E402
from rlab.scenarios import get_scenario  # noqa: E402
from rlab.store.reader import StoreReader  # noqa: E402

VALID_GUESSES = '''
def valid(example, completion):
    """Share of guesses the environment accepted (dense: every group has spread)."""
    answers = [m["content"] for m in completion if m["role"] == "user"][1:]
    return 1.0 - sum(a.startswith("bad") for a in answers) / max(len(answers), 1)

WEIGHTS = {"valid": 1.0}
'''


def raw_model(folder: Path) -> Path:
    """An untrained tiny policy (seeded) saved as a model directory."""
    torch.manual_seed(0)
    tokenizer = build_tokenizer()
    LlamaForCausalLM(build_config(len(tokenizer))).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _timed(fn):
    """(seconds, fn())."""
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


class Counted:
    """The policy, counting the prompt tokens each turn runs through the model:
    with ``reuse`` only those past the last turn's kept KV (the turn cache), else
    every distinct prompt whole (the engine before issue 16)."""

    def __init__(self, policy, reuse: bool):
        self.policy, self.render, self.reuse = policy, policy.render, reuse
        self.prefilled = self.reused = 0

    def sample(self, prompt_ids, *, cache=None, **kwargs):
        if not self.reuse:
            self.prefilled += sum(len(p) for p in {tuple(p) for p in prompt_ids})
            return self.policy.sample(prompt_ids, **kwargs)
        out = self.policy.sample(prompt_ids, cache=cache, **kwargs)
        self.prefilled, self.reused = cache.prefilled_tokens, cache.reused_tokens
        return out


def _rollout_seconds(rollout, examples, repeats: int, seed: int) -> tuple[dict, Rollouts]:
    """Seconds of playing ``examples`` with a full prefill per turn and with the
    turn cache, alternated ``repeats`` times from the same seed, and the prompt
    tokens each ran (the last repeat); the cached rollouts."""
    seconds: dict[str, list[float]] = {"full_prefill": [], "turn_cache": []}
    tokens: dict[str, dict[str, int]] = {}
    policy = rollout.sampler
    for _ in range(repeats):
        for way in seconds:
            torch.manual_seed(seed)
            rollout.sampler = counted = Counted(policy, reuse=way == "turn_cache")
            took, played = _timed(lambda: rollout.play(examples))
            seconds[way].append(took)
            tokens[way] = {"prefilled": counted.prefilled, "reused": counted.reused}
    rollout.sampler = policy
    return {"seconds": seconds, "prompt_tokens": tokens}, played


def speed(args: argparse.Namespace) -> dict:
    """One number_guess step's parts, timed side by side.

    The rollout is played ``--repeats`` times each way (full prefill per turn,
    turn cache), alternated; scoring once; then the update (``num_iterations``
    clipped policy-gradient steps) runs on per-turn samples and on one
    sequence per episode, alternately ``--repeats`` times, each from the same
    weights, so both layouts see the same machine load. A step is rollout +
    scoring + update: before = with per-turn samples, after = one sequence
    per episode. Before = full prefill + per-turn samples (the engine
    before issue 16); after = turn cache + one sequence per episode.
    """
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        scenario = get_scenario(args.scenario)
        if args.scenario == "number_guess" and args.untrained:
            rewards, model = tmp / "rewards.py", raw_model(tmp / "model")
            rewards.write_text(VALID_GUESSES)
        else:  # the scenario's warm-started tiny policy and its own rubric
            rewards, model = scenario.reward_file, ensure_tiny_model(scenario, seed=0)
        config = RunConfig(scenario=args.scenario, model=model, db=tmp / "speed.db",
                           seed=args.seed, prompts_per_step=args.prompts_per_step, group_size=args.group_size,
                           advantage="gigpo", store=False, **dict(scenario.run_defaults))
        session = start(config)
        try:
            examples = session.rng.sample(session.train_examples, config.prompts_per_step)
            rollout_parts, rollouts = _rollout_seconds(session.parts.rollout, examples, args.repeats, args.seed)
            score_s, scored = _timed(lambda: score(rollouts, load_rubric(rewards)))
        finally:
            session.rewards.scoring.close()
    advantages = rollout_advantages(rollouts, scored.rewards, scored.errored_groups, method="gigpo",
                                    turn_rewards=scored.turn_rewards)
    layouts = {"turn": to_batch(rollouts, scored, advantages, 1, per_turn=True).samples,
               "episode": to_batch(rollouts, scored, advantages, 1).samples}
    model = session.parts.policy.model
    weights = copy.deepcopy(model.state_dict())
    update_s: dict[str, list[float]] = {"turn": [], "episode": []}
    metrics: dict[str, dict[str, float]] = {}
    for _ in range(args.repeats):
        for unit, samples in layouts.items():
            model.load_state_dict(weights)
            trainer = Trainer(model, session.parts.policy.pad_id, TrainConfig.from_run(config))
            seconds, metrics[unit] = _timed(lambda: trainer.step(samples))
            update_s[unit].append(seconds)
    update = {unit: statistics.median(values) for unit, values in update_s.items()}
    rollout_s = rollout_parts["seconds"]
    rollout = {way: statistics.median(values) for way, values in rollout_s.items()}
    step = {"turn": rollout["full_prefill"] + score_s + update["turn"],
            "episode": rollout["turn_cache"] + score_s + update["episode"]}
    policy = ("untrained tiny model" if args.scenario == "number_guess" and args.untrained
              else "warm-started tiny model (seed 0)")
    return {"bench": "multistep-speed", "scenario": args.scenario, "policy": policy,
            "prompts_per_step": args.prompts_per_step, "group_size": args.group_size,
            "num_iterations": config.num_iterations, "torch_threads": torch.get_num_threads(),
            "turns": sum(len(t.turns) for t in rollouts.trajectories()),
            "samples": {unit: len(samples) for unit, samples in layouts.items()},
            "trained_samples": {unit: m["trained_samples"] for unit, m in metrics.items()},
            "loss": {unit: m["loss"] for unit, m in metrics.items()},
            "rollout_seconds": {way: [round(v, 3) for v in values] for way, values in rollout_s.items()},
            "rollout_speedup": round(rollout["full_prefill"] / rollout["turn_cache"], 2),
            "rollout_prompt_tokens": rollout_parts["prompt_tokens"],
            "score_seconds": round(score_s, 3),
            "update_seconds": {unit: [round(v, 3) for v in values] for unit, values in update_s.items()},
            "step_seconds": {unit: round(v, 3) for unit, v in step.items()},
            "update_speedup": round(update["turn"] / update["episode"], 2),
            "step_speedup": round(step["turn"] / step["episode"], 2)}


def _settings(method: str, args: argparse.Namespace) -> dict:
    """The learning rate (and GiGPO's omega) a method runs at: the sweep's choice
    when ``--settings`` names a sweep's JSON, else ``--lr`` and ``--omega``."""
    chosen = args.chosen.get(method, {}) if getattr(args, "chosen", None) else {}
    return {"lr": chosen.get("lr", args.lr), "omega": chosen.get("omega", args.omega) if method == "gigpo" else None}


def run_one(method: str, seed: int, args: argparse.Namespace, model: Path, db: Path,
            lr: float | None = None, omega: float | None = None, tag: str = "") -> dict:
    """One headless run; its summary and the held-out curve read back from the run file.

    ``lr`` / ``omega`` default to :func:`_settings`; ``tag`` names a sweep's runs."""
    chosen = _settings(method, args)
    lr = chosen["lr"] if lr is None else lr
    omega = (chosen["omega"] if omega is None else omega) if method == "gigpo" else None
    label = "gigpo_std" if method == "gigpo" and args.gigpo_mode == "mean_std_norm" else method
    label += "-all_tokens" if args.loss_tokens == "all" else ""
    name = f"{args.scenario}-{label}{tag}-s{seed}"
    cmd = [sys.executable, "-P", "-m", "rlab.engine.cli", "run", "--headless", "--scenario", args.scenario,
           "--model", str(model), "--advantage", method, "--seed", str(seed), "--max-steps", str(args.max_steps),
           "--eval-every", str(args.eval_every), "--prompts-per-step", str(args.prompts_per_step),
           "--group-size", str(args.group_size), "--lr", str(lr), "--lr-warmup-steps", str(args.warmup),
           "--gigpo-mode", args.gigpo_mode, "--loss-tokens", args.loss_tokens, "--db", str(db), "--name", name,
           # no alert pauses a bench run: nobody is there to resume it (the alerts are still stored)
           "--alert", "pause_on="]
    cmd += ["--omega", str(omega)] if omega is not None else []
    cmd += ["--eval-size", str(args.eval_size)] if args.eval_size else []
    if args.max_seconds:
        cmd += ["--max-seconds", str(args.max_seconds)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    t0 = time.perf_counter()
    summary = _finished_summary(db, name)
    if summary is None:
        done = subprocess.run(["nice", "-n", str(args.nice), *cmd], capture_output=True, text=True, env=env,
                              cwd=db.parent)
        if done.returncode != 0:
            raise RuntimeError(f"{name} failed: {done.stderr[-2000:]}")
        summary = json.loads(done.stdout.strip().splitlines()[-1])
    reader = StoreReader(db)
    rows = reader.step_metrics(summary["run_id"])
    curve = [[r["step"], r["eval/pass_at_1"]] for r in rows if r.get("eval/pass_at_1") is not None]
    sampled = [r["success_rate"] for r in rows if r.get("success_rate") is not None]
    return {
        "name": name, "method": method, "seed": seed, "lr": lr, "omega": omega,
        "wall_seconds": None if summary.get("reused") else round(time.perf_counter() - t0, 1),
        "reused": bool(summary.get("reused")),
        "train_seconds": summary["seconds"], "steps": summary["steps"],
        "success_initial": curve[0][1] if curve else None, "success_final": curve[-1][1] if curve else None,
        "eval_curve": curve,
        "first_step_all_solved": next((step for step, success in curve if success == 1.0), None),
        # the first eval at or above the stated level: how soon the held-out walk is good enough
        "steps_to_level": next((step for step, success in curve if success >= args.success_level), None),
        # the area under the held-out curve: how much of the run the policy was good, not its last eval only
        "success_mean_over_evals": _mean([success for _, success in curve[1:]]),
        # training levels only, sampled at the run's temperature: what a sweep may choose by
        "sampled_success": [round(v, 3) for v in sampled],
        "train_success_tail": _mean(sampled[-args.tail:]),
        # groups whose rewards all tie carry no episode-level signal (GRPO's advantage is 0 there)
        "zero_spread_share": _mean([r["frac_reward_zero_std"] for r in rows if r.get("frac_reward_zero_std")
                                    is not None]),
        # turns whose anchor group (identical rendered state in the group) has more than one member
        "anchor_shared_frac_mean": _mean([r["gigpo/anchor_shared_frac"] for r in rows
                                          if "gigpo/anchor_shared_frac" in r]),
        "late_walks": late_walks(reader, summary["run_id"], summary["steps"], args.tail,
                                 get_scenario(args.scenario).success or "reached"),
    }


def _finished_summary(db: Path, name: str) -> dict | None:
    """A run called ``name`` that already finished in ``db`` (an interrupted bench
    run again with the same ``--db``): its id, steps and seconds (created to ended,
    evals and load included), so it is read, not rerun. None when there is none;
    a run of that name that did not finish must be renamed or removed first,
    since run names are unique."""
    if not db.exists():
        return None
    row = StoreReader(db).run_by_name(name)
    if row is None:
        return None
    if row["status"] != "finished":
        raise RuntimeError(f"{name} is in {db} but {row['status']}: give the bench another --db")
    return {"run_id": row["id"], "steps": row["last_step"], "reused": True,
            "seconds": round(row["ended_at"] - row["created_at"], 1)}


def late_walks(reader: StoreReader, run_id: int, last_step: int, tail: int, success: str = "reached") -> dict:
    """The sampled walks of the last ``tail`` steps: success rate (the success
    function's ``parse_status`` "ok"), and of the walks that succeeded, where the
    rubric says so (the maze's ``excess_moves``), the mean moves beyond the
    shortest walk and the share that were shortest."""
    excess: list[int] = []
    walks = solved = 0
    for step in range(last_step - tail + 1, last_step + 1):
        for row in reader.groups_of_step(run_id, step):
            group = reader.group(row["id"])
            assert group is not None
            for trajectory in group["trajectories"]:
                walks += 1
                details = trajectory["details"].get(success, {})
                solved += details.get("parse_status") == "ok"
                if "excess_moves" in details:
                    excess.append(details["excess_moves"])
    return {"steps": tail, "walks": walks, "success": round(solved / walks, 3) if walks else None,
            "excess_moves_mean": _mean(excess),
            "shortest_share": round(sum(e == 0 for e in excess) / len(excess), 3) if excess else None}


def _mean(values: list[float]) -> float | None:
    return round(statistics.mean(values), 3) if values else None


def _spread(values: list[float | None]) -> dict | None:
    """Mean, min, max and std over the runs that have the figure; None when none has it."""
    present = [v for v in values if v is not None]
    if not present:
        return None
    return {"mean": round(statistics.mean(present), 3), "min": min(present), "max": max(present),
            "std": round(statistics.stdev(present), 3) if len(present) > 1 else 0.0, "runs": len(present)}


def _prepare(args: argparse.Namespace) -> tuple[Path, Path, float]:
    """The warm-started tiny policy (seed 0, built on the runs' thread count) and the run file."""
    scenario = get_scenario(args.scenario)
    torch.set_num_threads(args.threads)  # a build on the runs' thread count, whatever the machine's cores
    t0 = time.perf_counter()
    model = Path(args.model) if args.model else ensure_tiny_model(scenario, seed=0)
    db = Path(args.db).resolve() if args.db else Path(tempfile.mkdtemp()) / "multistep.db"
    return model, db, time.perf_counter() - t0


def _at_level(runs: list[dict]) -> dict:
    """Steps to the stated held-out success level over seeds: how many runs got there,
    and the mean and median step of those that did."""
    steps = [r["steps_to_level"] for r in runs if r["steps_to_level"] is not None]
    return {"reached": f"{len(steps)}/{len(runs)}", "mean": _mean(steps),
            "median": statistics.median(steps) if steps else None}


def _curve_means(runs: list[dict]) -> list[list[float]]:
    """Held-out success per eval step, the mean over the runs (steps every run has)."""
    by_step: dict[int, list[float]] = {}
    for run in runs:
        for step, success in run["eval_curve"]:
            by_step.setdefault(step, []).append(success)
    return [[step, round(statistics.mean(v), 3)] for step, v in sorted(by_step.items()) if len(v) == len(runs)]


def curves(args: argparse.Namespace) -> dict:
    if args.settings:
        args.chosen = json.loads(Path(args.settings).read_text())["chosen"]
    model, db, build_s = _prepare(args)
    jobs = [(method, seed) for seed in args.seeds for method in args.methods]
    with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
        runs = list(pool.map(lambda job: run_one(job[0], job[1], args, model, db), jobs))
    methods = {}
    for method in args.methods:
        mine = [r for r in runs if r["method"] == method]
        methods[method] = {"settings": _settings(method, args),
                           "final_success": _spread([r["success_final"] for r in mine]),
                           "success_mean_over_evals": _spread([r["success_mean_over_evals"] for r in mine]),
                           "held_out_curve_mean": _curve_means(mine),
                           "steps_to_level": _at_level(mine),
                           "zero_spread_share": _spread([r["zero_spread_share"] for r in mine]),
                           "anchor_shared_frac": _spread([r["anchor_shared_frac_mean"] for r in mine]),
                           "late_success": _spread([r["late_walks"]["success"] for r in mine]),
                           "late_shortest_share": _spread([r["late_walks"]["shortest_share"] for r in mine]),
                           "initial_success": mine[0]["success_initial"] if mine else None, "runs": mine}
    return {"bench": "multistep-curves", "scenario": args.scenario, "seeds": args.seeds,
            "max_steps": args.max_steps, "eval_every": args.eval_every, "prompts_per_step": args.prompts_per_step,
            "group_size": args.group_size, "settings_from": args.settings, "warmup": args.warmup,
            "gigpo_mode": args.gigpo_mode, "loss_tokens": args.loss_tokens, "success_level": args.success_level,
            "max_seconds": args.max_seconds, "parallel": args.parallel, "threads_per_run": args.threads,
            "tiny_model_build_s": round(build_s, 1), "db": str(db), **methods}


def sweep(args: argparse.Namespace) -> dict:
    """Each method's learning rate (and GiGPO's omega), chosen on training levels only.

    Stage 1 runs every method at every ``--lrs`` value (GiGPO at omega 1) on
    ``--seeds``; stage 2 runs GiGPO at its best learning rate with each other
    ``--omegas`` value. A setting's score is the sampled success on the
    training levels over the last ``--tail`` steps (the ``success_rate`` step
    metric, averaged over the sweep's seeds); the held-out split is never read
    (the engine's own held-out evals are cut to ``--eval-size`` 1 and left
    unread). The best score per method is ``chosen``; a tie goes to the
    setting listed first.
    """
    args.eval_size = 1
    model, db, build_s = _prepare(args)

    def play(jobs: list[tuple[str, float, float | None]]) -> list[dict]:
        expanded = [(m, lr, om, seed) for m, lr, om in jobs for seed in args.seeds]
        with concurrent.futures.ThreadPoolExecutor(args.parallel) as pool:
            runs = list(pool.map(lambda j: run_one(j[0], j[3], args, model, db, lr=j[1], omega=j[2],
                                                   tag=f"-lr{j[1]:g}" + (f"-w{j[2]:g}" if j[2] is not None else "")),
                                 expanded))
        out = []
        for method, lr, omega in jobs:
            mine = [r for r in runs if (r["method"], r["lr"], r["omega"]) == (method, lr, omega)]
            out.append({"method": method, "lr": lr, "omega": omega,
                        "train_success_tail": _mean([r["train_success_tail"] for r in mine]),
                        "train_success_per_seed": [r["train_success_tail"] for r in mine],
                        "zero_spread_share": _mean([r["zero_spread_share"] for r in mine]),
                        "anchor_shared_frac": _mean([r["anchor_shared_frac_mean"] for r in mine]),
                        "train_seconds": [r["train_seconds"] for r in mine]})
        return out

    def best(rows: list[dict], method: str) -> dict:
        mine = [r for r in rows if r["method"] == method]
        return max(mine, key=lambda r: (r["train_success_tail"] or 0.0, -mine.index(r)))

    stage1 = play([(m, lr, 1.0 if m == "gigpo" else None) for m in args.methods for lr in args.lrs])
    rows = list(stage1)
    if "gigpo" in args.methods:
        lr = best(stage1, "gigpo")["lr"]
        rows += play([("gigpo", lr, omega) for omega in args.omegas if omega != 1.0])
    chosen = {m: {"lr": best(rows, m)["lr"], **({"omega": best(rows, m)["omega"]} if m == "gigpo" else {})}
              for m in args.methods}
    return {"bench": "multistep-sweep", "scenario": args.scenario, "seeds": args.seeds, "max_steps": args.max_steps,
            "score": f"sampled success on training levels, last {args.tail} steps", "lrs": args.lrs,
            "omegas": args.omegas, "prompts_per_step": args.prompts_per_step, "group_size": args.group_size,
            "gigpo_mode": args.gigpo_mode, "loss_tokens": args.loss_tokens, "parallel": args.parallel,
            "tiny_model_build_s": round(build_s, 1), "db": str(db), "settings": rows, "chosen": chosen}


def _run_options(parser: argparse.ArgumentParser, *, steps: int) -> None:
    """The options every learning bench (curves, sweep) shares."""
    parser.add_argument("--scenario", default="maze_loose")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--max-steps", type=int, default=steps)
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--prompts-per-step", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2, help="learning-rate warm-up steps")
    parser.add_argument("--tail", type=int, default=40,
                        help="the last steps whose sampled walks late_walks (and a sweep's score) summarise")
    parser.add_argument("--methods", nargs="+", default=["gigpo", "grpo"], choices=["gigpo", "grpo", "dr_grpo"],
                        help="dr_grpo: the episode advantage without the std, which is GiGPO at omega 0")
    parser.add_argument("--gigpo-mode", default="mean_norm", choices=["mean_norm", "mean_std_norm"],
                        help="GiGPO's normalisation (GRPO always divides by the group's std)")
    parser.add_argument("--loss-tokens", default=RunConfig.model_fields["loss_tokens"].default,
                        choices=get_args(LossTokens), help=RunConfig.model_fields["loss_tokens"].description)
    parser.add_argument("--max-seconds", type=float, default=0,
                        help="training-time budget per run (seconds; 0: none, the default); the run stops, "
                        "and its learning rate decays, over whichever of --max-steps and this ends first, "
                        "so with a time budget the curves depend on the machine's speed")
    parser.add_argument("--db", default=None, help="run file to keep (default: a temporary one)")
    parser.add_argument("--parallel", type=int, default=2, help="runs at once")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--nice", type=int, default=10, help="the runs' niceness (19: others' work goes first)")
    parser.add_argument("--success-level", type=float, default=0.5,
                        help="steps_to_level: the first eval whose held-out success is at least this")
    parser.add_argument("--eval-size", type=int, default=None, help="held-out examples per eval (None: all)")
    parser.add_argument("--lr", type=float, default=5e-4, help="learning rate (without --settings)")
    parser.add_argument("--omega", type=float, default=1.0, help="GiGPO's omega (without --settings)")
    parser.add_argument("--model", default=None,
                        help="the runs' --model (a directory or smollm2-135m, LoRA by default); "
                        "default: the scenario's warm-started tiny policy")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="bench", required=True)
    fast = sub.add_parser("speed", help="number_guess step seconds: one sequence per episode vs per turn")
    fast.add_argument("--repeats", type=int, default=3, help="updates timed per layout (median)")
    fast.add_argument("--scenario", default="number_guess",
                      help="a multi-step scenario; its warm-started policy and its rubric")
    fast.add_argument("--untrained", action="store_true",
                      help="number_guess with an untrained policy and a valid-guess reward")
    fast.add_argument("--seed", type=int, default=0)
    fast.add_argument("--prompts-per-step", type=int, default=8)
    fast.add_argument("--group-size", type=int, default=8)
    learn = sub.add_parser("curves", help="GiGPO vs GRPO held-out success, same seeds, fixed steps")
    _run_options(learn, steps=300)
    learn.add_argument("--settings", default=None,
                       help="a sweep's JSON output: each method's chosen lr (and omega) instead of --lr/--omega")
    choose = sub.add_parser("sweep", help="each method's lr (and GiGPO's omega), chosen on training levels only")
    _run_options(choose, steps=100)
    choose.add_argument("--lrs", type=float, nargs="+", default=[1e-4, 3e-4, 1e-3])
    choose.add_argument("--omegas", type=float, nargs="+", default=[0.5, 1.0, 2.0],
                        help="GiGPO's omegas, tried at its best learning rate of the omega-1 stage")
    args = parser.parse_args()
    print(json.dumps({"speed": speed, "curves": curves, "sweep": sweep}[args.bench](args)))


if __name__ == "__main__":
    main()
