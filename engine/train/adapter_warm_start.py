"""A real model's warm start: its LoRA adapter learns the task's demonstrations before RL.

A 135M chat model that has never seen the task's tools writes no
``<tool_call>`` block, so every group's rewards are 0 and GRPO has nothing
to rank (docs/results.md: SmolLM2 on the calculator, 900 s, pass@1 0 -> 0).
Practitioners start RL from a model that already calls its tools: supervised
fine-tuning on a few hundred tool-call conversations, the assistant's turns
only (TRL's SFTTrainer with ``assistant_only_loss``; ART's and TRL's agent
recipes). Here that is ``engine.train.sft.fit`` on the run's own LoRA
adapter, with the pairs rendered exactly as the sampler renders each turn
(the template's tool format, else the engine's Hermes convention), and RL
goes on training the same adapter.

The trained adapter is cached by content (:func:`warm_start_key`): the
model's weights, the demonstrations as rendered (so the tools, the system
prompt and the chat template), the adapter's settings, the steps, the
recipe and the seed. A second run with the same settings starts at once.
The run's manifest records it under ``warm_start`` (``rlab compare`` names
it as a treatment: ``--no-warm-start`` is the control arm).
"""

from __future__ import annotations

import json
import random
import shutil
import os
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from peft import load_peft_weights, set_peft_model_state_dict
from tqdm import tqdm

from rlab.engine.paths import cache_root
from rlab.engine.policy.lora import save_adapter
from rlab.engine.policy.model import Policy
from rlab.engine.rewards.rubric import load_rubric
from rlab.engine.run.config import RunConfig
from rlab.engine.run.manifest import sha256_files, sha256_json
from rlab.engine.train.sft import SftPair, SftRecipe, fit, transcript_pairs
from rlab.engine.train.warm_start import probe
from rlab.engine.types import ToolScenario

#: The adapter's recipe: AdamW at 5e-4 (LoRA rank 16 learns the call format in tens of steps;
#: RL's own 2e-4 takes several times as many), a short warm-up, 8 conversations' turns a step.
RECIPE = SftRecipe(lr=5e-4, warm_up=5, batch=8)
#: Steps when ``--warm-start-steps`` is not given.
DEFAULT_STEPS = 40
#: Held-out examples the warm start is probed on, greedy, halfway and at the end.
PROBE_SIZE = 16
#: Bump when the recipe changes, so cached adapters are trained again.
RECIPE_VERSION = 1
#: The file beside a cached adapter that holds its :class:`AdapterWarmStart` figures.
FIGURES = "warm_start.json"


@dataclass(frozen=True)
class AdapterWarmStart:
    """A warm-started adapter: its content hash ``adapter`` (its cache folder's name) and that ``path``, the ``steps`` it
    trained, the last step's ``loss`` (nats per completion token), the final held-out probe
    (greedy ``probe_pass_at_1`` and ``probe_tool_use`` on :data:`PROBE_SIZE` eval examples),
    the ``seconds`` its training took and whether this run found it ``cached``."""

    adapter: str
    path: str
    steps: int
    demonstrations: int
    loss: float
    probe_pass_at_1: float
    probe_tool_use: float
    seconds: float
    cached: bool = False

    def manifest(self) -> dict[str, Any]:
        """The run manifest's ``warm_start``: ``on`` and the figures above."""
        return {"on": True} | asdict(self)


def warm_start_key(model_dir: Path, pairs: list[SftPair], config: RunConfig, steps: int) -> str:
    """The cache key of an adapter: sha256 over the model's weight files, the rendered
    demonstrations (``pairs``' token ids), the LoRA settings, the steps, recipe and seed."""
    return sha256_json({"model": sha256_files(model_dir), "pairs": [[p.context, p.completion] for p in pairs],
                        "lora": [config.lora_rank, config.lora_alpha, config.lora_targets], "steps": steps,
                        "recipe": asdict(RECIPE), "version": RECIPE_VERSION, "seed": config.seed})[:20]


def warm_start_adapter(policy: Policy, scenario: ToolScenario, config: RunConfig, model_dir: Path,
                       tools: list[dict[str, Any]],
                       autocast: Callable[[], AbstractContextManager[Any]]) -> AdapterWarmStart:
    """Warm-start ``policy``'s LoRA adapter on ``scenario.demonstrations(seed)`` for
    ``config.warm_start_steps`` (else :data:`DEFAULT_STEPS`) steps, or load the cached one.

    A progress bar on stderr gives the step, the loss, the probe and the time left.

    Raises:
        ValueError: the chat template does not render a demonstration's turn as an
            extension of its context (``engine.train.sft.transcript_pairs``).
    """
    steps = config.warm_start_steps or DEFAULT_STEPS
    demonstrations = scenario.demonstrations(config.seed)
    pairs = transcript_pairs(policy, demonstrations, scenario.system_prompt, tools)
    key = warm_start_key(model_dir, pairs, config, steps)
    folder = cache_root() / "adapters" / key
    if (folder / FIGURES).is_file():
        set_peft_model_state_dict(policy.model, load_peft_weights(str(folder)))
        found = AdapterWarmStart(**json.loads((folder / FIGURES).read_text()) | {"cached": True})
        print(f"rlab: the warm-started adapter is cached ({found.steps} steps on {found.demonstrations} "
              f"demonstrations, probe pass@1 {found.probe_pass_at_1:.2f}): {folder}", file=sys.stderr, flush=True)
        return found
    print(f"rlab: warm start of the LoRA adapter, once: {steps} supervised steps on {len(demonstrations)} "
          f"demonstrations ({len(pairs)} assistant turns), then RL on the same adapter; cached in {folder}",
          file=sys.stderr, flush=True)
    built = _train(policy, scenario, config, pairs, steps, autocast)
    result = AdapterWarmStart(adapter=key, path=str(folder), steps=steps, demonstrations=len(demonstrations),
                              loss=built["loss"], probe_pass_at_1=built["probe_pass_at_1"],
                              probe_tool_use=built["probe_tool_use"], seconds=built["seconds"])
    _save(policy, folder, result)
    return result


def _train(policy: Policy, scenario: ToolScenario, config: RunConfig, pairs: list, steps: int,
           autocast: Callable[[], AbstractContextManager[Any]]) -> dict[str, float]:
    """Run the loop with its bar; the last loss, the final probe and the seconds taken."""
    examples, rubric = scenario.eval_examples()[:PROBE_SIZE], load_rubric(scenario.reward_file)
    bar = tqdm(total=steps, desc="warm start", unit="step", file=sys.stderr)
    figures = {"loss": float("nan"), "probe_pass_at_1": float("nan"), "probe_tool_use": float("nan")}
    started = time.monotonic()

    def after_step(step: int, loss: float) -> bool:
        figures["loss"] = loss
        if step in (steps // 2, steps):
            with torch.no_grad():
                held_out = probe(policy, scenario, examples, rubric)
            figures["probe_pass_at_1"], figures["probe_tool_use"] = held_out.pass_at_1, held_out.tool_use_rate
        bar.set_postfix_str(f"loss {loss:.3f}, held-out probe ({len(examples)}, greedy): pass@1 "
                            f"{figures['probe_pass_at_1']:.2f}, tool use {figures['probe_tool_use']:.2f}")
        bar.update(1)
        return False

    fit(policy.model, pairs, pad_id=policy.pad_id, steps=steps, recipe=RECIPE, rng=random.Random(config.seed),
        after_step=after_step, autocast=autocast)
    bar.close()
    policy.model.eval()
    return figures | {"seconds": round(time.monotonic() - started, 1)}


def _save(policy: Policy, folder: Path, result: AdapterWarmStart) -> None:
    """Write the adapter and its figures atomically (a temporary folder renamed)."""
    partial = folder.with_name(f"{folder.name}.partial-{os.getpid()}")
    save_adapter(policy.model, partial)
    (partial / FIGURES).write_text(json.dumps({k: v for k, v in asdict(result).items() if k != "cached"}, indent=2))
    try:
        partial.rename(folder)
    except OSError:  # another run saved the same adapter first
        shutil.rmtree(partial, ignore_errors=True)
