"""The tiny policy's supervised warm start, and the cache of warm-started builds.

A fresh tiny model (``engine.policy.tiny``) is trained with next-token
cross-entropy on the scenario's own *train* split (its ``sft_pairs``) until
greedy pass@1 on a probe drawn from that split reaches a target (40 % by
default), so RL has room to show. :func:`ensure_tiny_model` returns the
shipped copy when it matches, else a cached build (built now if missing).
"""

from __future__ import annotations

import math
import os
import random
import shutil
import sys
from dataclasses import dataclass
from typing import Any
from pathlib import Path

import torch
from tqdm import tqdm
from transformers import LlamaForCausalLM

from rlab.engine.paths import cache_root
from rlab.engine.policy.model import ModelLoadError, Policy
from rlab.engine.policy.tiny import (build_config, build_tokenizer, context_tokens, save_policy,
                                     scenario_model_key, shipped_model_dir)
from rlab.engine.run.config import RunConfig
from rlab.engine.rewards.rubric import Rubric, load_rubric
from rlab.engine.rollout.play import HeldOut, Rollout
from rlab.engine.rewards.success import SuccessRule
from rlab.engine.tools.process import ToolProcess
from rlab.engine.train.sft import SftRecipe, fit, text_pairs, transcript_pairs
from rlab.engine.types import Scenario, ToolScenario


def ensure_tiny_model(scenario: Scenario, *, seed: int = 0) -> Path:
    """Return the directory of the tiny model for ``scenario``: the shipped
    one when it matches, else a cached build (built now if missing).

    The warm start stops at probe pass@1 ``scenario.warm_start_target``
    (default 0.4) or after ``scenario.warm_start_steps`` steps (default
    4000); a target of None trains exactly that many steps (multi-step
    scenarios, whose warm-start data is random legal play).

    Building is deterministic for a seed and a torch thread count on a given
    CPU; a progress bar goes to stderr. The directory is written atomically
    (built in a temp dir, then renamed), so a killed build never leaves a
    half-written model behind.

    Raises:
        WarmStartError: the probe target was not reached within the budget.
    """
    shipped = shipped_model_dir(scenario, seed)
    if shipped is not None:
        return shipped
    path = cache_root() / "models" / scenario_model_key(scenario, seed)
    if (path / "config.json").is_file():
        return path
    # The lines around the bar say what it fills toward and why the build stopped.
    print(f"rlab: {_build_plan(scenario, seed, path)}", file=sys.stderr, flush=True)
    built = warm_start(scenario, seed=seed, target=scenario.warm_start_target, max_steps=scenario.warm_start_steps)
    partial = path.with_name(f"{path.name}.partial-{os.getpid()}")
    save_policy(built.policy, partial)
    try:
        partial.rename(path)
    except OSError:  # another process finished the same build first
        shutil.rmtree(partial, ignore_errors=True)
    print(f"rlab: {_build_result(scenario, built, path)}", file=sys.stderr, flush=True)
    if isinstance(scenario, ToolScenario):
        print(f"rlab: {_tool_report(scenario, built, seed)}", file=sys.stderr, flush=True)
    return path


def _build_plan(scenario: Scenario, seed: int, path: Path) -> str:
    """The line before a build: what it is, when it stops, where it is kept."""
    target, budget = scenario.warm_start_target, scenario.warm_start_steps
    stop = (f"until its greedy pass@1 on {PROBE_SIZE} train examples reaches {target:g} (the bar fills "
            f"toward it; at most {budget} steps, usually far fewer)" if target is not None
            else f"for {budget} steps")
    return (f"building the tiny policy for {scenario.name} (seed {seed}), once: it learns the "
            f"train split's answers {stop}; cached in {path}")


def _build_result(scenario: Scenario, built: WarmStart, path: Path) -> str:
    """The line after a build: why it stopped where it did."""
    if built.probe_pass_at_1 is None:
        return f"the tiny policy for {scenario.name} is ready after {built.steps} steps; {path} is reused from now on"
    return (f"the tiny policy for {scenario.name} is ready: pass@1 {built.probe_pass_at_1:.2f} on the train "
            f"examples reached the target {scenario.warm_start_target:g} at step {built.steps}, so the build "
            f"stopped there; {path} is reused from now on")




def _tool_report(scenario: ToolScenario, built: WarmStart, seed: int) -> str:
    """Whether the built policy calls its tools (its last probe, else a greedy probe of
    :data:`REPORT_SIZE` train examples now), and a warning when it does not: RL can only
    reward a call the policy makes."""
    probed = built.probed or probe(built.policy, scenario, scenario.train_examples(seed)[:REPORT_SIZE],
                                   load_rubric(scenario.reward_file))
    use, ok = probed.tool_use_rate, probed.tool_call_ok_rate
    report = (f"on {probed.num_examples} train examples, greedy, it called a tool in {use:.0%} of the episodes"
              + ("" if math.isnan(ok) else f", {ok:.0%} of its calls parsed and ran")
              + f", and solved {probed.pass_at_1:.0%}")
    if use > 0 and ok > 0:
        return report
    transcripts = scenario.sft_transcripts(seed)
    calling = sum(any(m.get("role") == "assistant" and "tool_calls" in m for m in t) for t in transcripts)
    return (f"warning: {report}: it does not call its tools yet, and RL cannot reward a call it never makes; "
            f"raise warm_start_steps (now {scenario.warm_start_steps}) or give it more transcripts that call "
            f"them ({calling} of {len(transcripts)} call one)")


class WarmStartError(ModelLoadError):
    """The supervised warm start did not reach its probe target within its step budget.

    A :class:`ModelLoadError`, so ``rlab`` reports it as one error line.
    """


@dataclass
class WarmStart:
    """A warm-started policy, the supervised steps it took, its last probe pass@1 and that
    probe's whole evaluation (a tool task's tool use with it; None when no probe ran)."""

    policy: Policy
    steps: int
    probe_pass_at_1: float | None
    probed: HeldOut | None = None


#: The warm-start recipe. A short linear warm-up and gradient clipping keep
#: the first steps from blowing up the freshly initialised model, and a
#: moderate peak rate keeps the loss descending smoothly; a constant 3e-3
#: (recipe 1) plateaued near loss 0.9 on some CPUs and never reached the
#: target. Probe pass@1 climbs from about 0.1 to 0.6 within some 30 steps,
#: so near the target (from half of it on) the probe runs every step and
#: the stop lands within a point or two of the target.
WARM_LR = 1e-3
WARM_UP_STEPS = 100
WARM_BATCH = 64
WARM_CLIP = 1.0
RECIPE = SftRecipe(lr=WARM_LR, warm_up=WARM_UP_STEPS, batch=WARM_BATCH, clip=WARM_CLIP)
PROBE_EVERY = 10
PROBE_SIZE = 200
#: Train examples of the probe that reports a tool task's tool use after a build without probes.
REPORT_SIZE = 64


def warm_start(scenario: Scenario, *, seed: int, target: float | None, max_steps: int = 4000) -> WarmStart:
    """Supervised warm start on the train split until probe pass@1 >= ``target``.

    The loop is ``engine.train.sft.fit`` (completion tokens only) with
    :data:`RECIPE`: batches of :data:`WARM_BATCH`, AdamW at :data:`WARM_LR`
    after a linear warm-up of :data:`WARM_UP_STEPS` steps, gradients clipped
    to :data:`WARM_CLIP` (L2). The probe is :data:`PROBE_SIZE` train-split
    examples scored with greedy decoding and the scenario's rubric every
    :data:`PROBE_EVERY` steps, and every step once a probe reached half the
    target.

    Raises:
        WarmStartError: ``target`` is not None and was not reached within
            ``max_steps``; the message gives the best probe score.
    """
    torch.manual_seed(seed)
    tokenizer = build_tokenizer(tools=isinstance(scenario, ToolScenario))
    model = LlamaForCausalLM(build_config(len(tokenizer), context_tokens(scenario)))
    policy = Policy(model, tokenizer, "cpu")
    pairs = (transcript_pairs(policy, scenario.sft_transcripts(seed), scenario.system_prompt, tool_schemas(scenario))
             if isinstance(scenario, ToolScenario) else text_pairs(policy, scenario.sft_pairs(seed)))
    probe_examples = scenario.train_examples(seed)[:PROBE_SIZE]
    rubric = load_rubric(scenario.reward_file)
    # With a target the bar fills toward it (the build stops there, usually long before max_steps,
    # which a step bar would show as hours to go); without one it counts the fixed steps.
    bar = (tqdm(total=target, desc=f"building tiny model, until probe pass@1 {target:g}", file=sys.stderr,
                bar_format="{desc}: {n:.2f}/{total:g} |{bar}| {elapsed} {postfix}")
           if target is not None else tqdm(total=max_steps, desc="building tiny model", file=sys.stderr, unit="step"))
    score: float | None = None
    best, probed = 0.0, None

    def after_step(step: int, loss: float) -> bool:
        nonlocal score, best, probed
        if target is None:
            bar.update(1)
            return False
        if not (score is not None and score >= target / 2) and step % PROBE_EVERY:
            return False
        probed = probe(policy, scenario, probe_examples, rubric)
        if math.isnan(probed.pass_at_1):
            bar.close()
            raise WarmStartError(
                f"the warm start of {scenario.name} cannot score its probe: the task's reward functions raised on "
                f"the tiny policy's greedy completions, so pass@1 has no verdict; the probe passes each completion as "
                f"the policy's text reply (a str, not a list of messages): make the rewards take a str too, or train a "
                f"model of your own (--model)")
        score, best = probed.pass_at_1, max(best, probed.pass_at_1)
        bar.n = min(score, target)
        bar.set_postfix_str(f"step {step} of at most {max_steps}, loss {loss:.3f}")
        return score >= target

    steps = fit(model, pairs, pad_id=policy.pad_id, steps=max_steps, recipe=RECIPE, rng=random.Random(seed),
                after_step=after_step)
    bar.close()
    if target is not None and (score is None or score < target):
        raise WarmStartError(
            f"the warm start of {scenario.name} reached probe pass@1 {best:.2f} < target {target} "
            f"in {max_steps} steps; raise the scenario's warm_start_steps or lower its warm_start_target"
        )
    return WarmStart(policy, steps, score, probed)


def tool_schemas(scenario: ToolScenario) -> list[dict[str, Any]]:
    """The JSON schemas of ``scenario``'s tools, as its tool process offers them.

    Raises:
        engine.tools.process.ToolsError: the tools file cannot be offered.
    """
    tools = ToolProcess(scenario.tools_file)
    try:
        return tools.schemas
    finally:
        tools.close()


def probe(policy: Policy, scenario: Scenario, examples: list[dict], rubric: Rubric) -> HeldOut:
    """Greedy pass@1 of ``policy`` on ``examples`` by the scenario's success rule (and a tool
    task's tool use): the run's own held-out evaluation (``engine.rollout.play``), with an
    8-token budget per turn (a tool scenario: its own, a call is longer)."""
    budget = scenario.run_defaults.get("max_new_tokens", 8) if isinstance(scenario, ToolScenario) else 8
    rollout = Rollout(policy, scenario, RunConfig(max_new_tokens=budget))
    try:
        return rollout.evaluate(examples, rubric, SuccessRule.of(scenario))
    finally:
        rollout.close()
