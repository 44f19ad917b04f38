"""A run's session: everything the training loop holds, in named parts.

``engine.run.start`` opens a run (new, resumed or forked) into a
:class:`Session`; :func:`build_parts` builds its working parts from its
options: the policy (LoRA if asked), the trainer, the sampler (the policy
itself, or vLLM servers), the rollout and the judge. See
docs/architecture.md for where this sits in a step.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch


from rlab.engine.alerts.thresholds import AlertThresholds
from rlab.engine.run.config import RunConfig
from rlab.engine.policy.device import set_cpu_threads, training_options, uses_bf16
from rlab.engine.policy.lora import LoraSettings, apply_lora
from rlab.engine.policy.model import Policy, default_device
from rlab.engine.policy.vllm import VLLMBackend
from rlab.engine.policy.vllm_launch import ServeSettings, ServerProcess, find_vllm_python, launch, lora_rank_limit
from rlab.engine.policy.vllm_pool import VLLMPool, split_urls
from rlab.engine.recorder import Pauses, Recorder, RunRef
from rlab.engine.rewards.judge.ruler import RulerJudge
from rlab.engine.rewards.rubric import Rubric
from rlab.engine.rewards.scoring_process import ProcessRubric, RubricVersion, ScoringProcess
from rlab.engine.rollout.play import Rollout
from rlab.engine.run.settings import SettingsChange, check_prompts, check_reference
from rlab.engine.train.checkpoint import CheckpointError, save_checkpoint
from rlab.engine.train.retention import prune_checkpoints
from rlab.engine.train.trainer import TrainConfig, Trainer
from rlab.engine.rewards.success import SuccessRule
from rlab.engine.types import Example, Scenario
from rlab.store.errors import UsageError
from rlab.store.writer import StoreWriter


def run_dir(db: Path, name: str) -> Path:
    """Per-run files (the editable reward file, checkpoints, adapters) beside the
    run file: ``rlab_runs/<run file name>/<run name>``, so two run files in one
    folder never share a run's folder (a run name is unique only in its file)."""
    db = db.resolve()
    return db.parent / "rlab_runs" / db.name / name


@dataclass
class Parts:
    """The run's working parts, built from its options (:func:`_build`).

    rollouts sample from the policy itself (HF generate) or from ``vllm``
    (vLLM servers that serve the trained LoRA adapter); ``server`` is the
    vLLM server the run started itself (no ``--vllm-url``), stopped by
    :meth:`close_servers`; judge is None without ``--judge-model``.
    """

    policy: Policy
    vllm: VLLMPool | None
    trainer: Trainer
    rollout: Rollout
    judge: RulerJudge | None
    server: ServerProcess | None = None

    def close_servers(self) -> None:
        """Close the vLLM connections, stop the server this run started, if any, and its tool process."""
        self.rollout.close()
        if self.vllm is not None:
            self.vllm.close()
        if self.server is not None:
            self.server.stop()

    def with_events(self, writer: StoreWriter, run_id: int) -> Parts:
        """Record a dropped rollout server as a ``server_dropped`` event of run ``run_id``."""
        if self.vllm is not None:
            self.vllm.on_drop = lambda url, reason: writer.write_event(
                run_id, "server_dropped", {"url": url, "reason": reason,
                                           "servers_left": len(self.vllm.backends) if self.vllm else 0})
        return self


@dataclass
class RunRewards:
    """The run's reward functions.

    file: the run's own copy of the reward file (what the TUI's editor
    opens). rubric: the version scoring now, in ``scoring``, a separate
    process, so user reward code never runs in the engine
    (``engine.rewards.scoring_process``). replays: after a resume, the
    reward edits of the re-run steps, ``(step, version, rubric)``, applied
    again at the steps they first took over at (``engine.rewards.edit.timeline``).
    The version number in force is the recorder's.
    """

    file: Path
    rubric: ProcessRubric
    scoring: ScoringProcess
    replays: list[tuple[int, int, RubricVersion]] = field(default_factory=list)

    def use(self, rubric: Rubric | RubricVersion) -> None:
        """Score with ``rubric`` from now on, in the scoring process."""
        self.rubric = ProcessRubric(rubric, self.scoring)


@dataclass
class Session:
    """Everything a running loop holds, in named parts.

    parts: policy, trainer, sampler, rollout, judge. rewards: the reward
    functions. recorder: the run's row and its bookkeeping at every step's
    end (success, storing, events, alerts, commands; ``engine.recorder``).
    first_step: 1, or the step after the checkpoint a resumed (or forked) run
    restarts from. rng: draws each step's prompts (its state is
    checkpointed). settings_replays: after a resume, the setting changes of
    the re-run steps, applied again, with their numbers, at the steps they
    were first made for (``engine.run.settings``). step: the step in progress
    (``first_step - 1`` until the first starts: the starting policy's evaluation).
    """

    config: RunConfig
    scenario: Scenario
    parts: Parts
    rewards: RunRewards
    recorder: Recorder
    first_step: int
    rng: random.Random
    settings_replays: list[SettingsChange] = field(default_factory=list)
    step: int = 0

    @property
    def name(self) -> str:
        """The run's name (unique in its run file)."""
        return self.recorder.run.name

    @property
    def run_id(self) -> int:
        """The run's row id in the run file."""
        return self.recorder.run.run_id

    @property
    def writer(self) -> StoreWriter:
        """The run file's writer."""
        return self.recorder.writer

    @functools.cached_property
    def train_examples(self) -> list[Example]:
        """The train split, built once per run: every step samples from it."""
        return self.scenario.train_examples(self.config.seed)

    @functools.cached_property
    def eval_examples(self) -> list[Example]:
        """The held-out examples of every evaluation (the first ``eval_size``)."""
        examples = self.scenario.eval_examples()
        size = self.config.eval_size
        return examples if size is None else examples[:size]

    @property
    def files(self) -> Path:
        """This run's folder beside the run file."""
        return run_dir(self.config.db, self.name)

    def use_settings(self, config: RunConfig) -> None:
        """Run with ``config`` from the next step: the trainer's learning rate,
        temperature and KL weight, the rollouts' settings, the alerts' thresholds.

        Raises:
            SettingsError: a KL weight above 0 for a run without a reference
                model (it trains every weight and started with beta 0), or more
                prompts a step than the task has (``rlab set`` checks the bounds
                a run's start checks: a step that cannot draw them would fail the run).
        """
        trainer = self.parts.trainer
        check_reference(config.beta, has_reference=trainer.reference is not None or config.lora_rank > 0)
        check_prompts(config, len(self.train_examples), f"task {self.scenario.name!r}")
        trainer.config = replace(trainer.config, lr=config.lr, temperature=config.temperature, beta=config.beta)
        self.parts.rollout.config = config
        self.recorder.retune(AlertThresholds.model_validate(config.alerts))
        self.config = config
        self.recorder.remedies["collapse"] = rewind_hint(self.name, config)

    def close(self) -> None:
        """Stop what the run started: its servers, its scoring process, its writer."""
        self.parts.close_servers()
        self.rewards.scoring.close()
        self.writer.close()


def build_parts(config: RunConfig, scenario: Scenario, model_dir: Path) -> Parts:
    """Policy (with LoRA if asked), trainer, sampler (hf or vLLM), rollout and judge.

    Raises:
        UsageError: --backend vllm without LoRA; --sampler-int8 on a bf16, GPU or vLLM run.
        rlab.engine.policy.vllm.VLLMError: the vLLM server cannot be reached.
    """
    set_cpu_threads(config.threads, tiny_policy=config.model is None)
    # The tiny policy (0.5 M parameters) is launch-bound on a GPU: an H100 ran the default
    # run's 260 steps in 45 s, as one CPU thread did. It stays on the CPU unless asked.
    policy = Policy.load(model_dir, config.device or ("cpu" if config.model is None else default_device()))
    policy.generation = config.generation
    if config.lora_rank:
        policy.model = apply_lora(policy.model, LoraSettings(
            rank=config.lora_rank, alpha=config.lora_alpha, target_modules=config.lora_targets))
    bf16 = uses_bf16(policy.model, policy.device, config.bf16)
    autocast = training_options(policy.model, policy.device,
                                gradient_checkpointing=config.gradient_checkpointing, bf16=bf16)
    policy.sample_dtype = torch.bfloat16 if bf16 else None
    if config.sampler_int8 and (bf16 or torch.device(policy.device).type != "cpu" or config.backend != "hf"):
        raise UsageError("--sampler-int8 quantizes the sampling copy of a float32 run on the CPU with the hf "
                         "backend: add --no-bf16 (and --device cpu), or leave --sampler-int8 out")
    policy.sample_int8 = config.sampler_int8
    trainer = Trainer(policy.model, policy.pad_id, TrainConfig.from_run(config), autocast=autocast)
    vllm, server = None, None
    if config.backend == "vllm":
        if not config.lora_rank:
            raise UsageError("--backend vllm trains a LoRA adapter: pass --lora-rank N (e.g. 16)")
        vllm, server = _rollout_servers(config, model_dir, policy)
    judge = None
    if config.judge is not None:
        judge = RulerJudge.from_settings(config.judge, rubric=scenario.judge_rubric)
    rollout = Rollout(vllm or policy, scenario, config, tokenizer=policy.tokenizer)
    return Parts(policy, vllm, trainer, rollout, judge, server)


def _rollout_servers(config: RunConfig, model_dir: Path, policy: Policy) -> tuple[VLLMPool, ServerProcess | None]:
    """The vLLM servers of ``--vllm-url``, or one started for this run on a free loopback port.

    Raises:
        ValueError: a malformed ``--vllm-url`` list.
        rlab.engine.policy.vllm.VLLMError: a server cannot be reached, or
            none could be started (the message has the install commands).
    """
    server = None
    if config.vllm_url is None:
        settings = ServeSettings(model_dir, max_lora_rank=lora_rank_limit(config.lora_rank))
        server = launch(settings, find_vllm_python(config.vllm_python))
        urls = [server.url]
    else:
        urls = split_urls(config.vllm_url)
    try:
        pool = VLLMPool([VLLMBackend(url, config.vllm_model, render=policy.render) for url in urls])
        pool.served_models()  # fail fast, with the fix, when a server is not there
    except BaseException:
        if server is not None:
            server.stop()
        raise
    return pool, server


def recorder_of(config: RunConfig, run: RunRef, success: SuccessRule, weights: dict[str, float],
                version: int = 1) -> Recorder:
    """The run's recorder: its ``--alert`` thresholds, its success rule, what pauses it,
    and the rewind a collapse alert names."""
    pauses = Pauses(reward_error=config.pause_on_reward_error,
                    judge_failure=config.judge is not None and config.judge.on_failure == "pause")
    recorder = Recorder(run, success=success, weights=weights, version=version,
                        thresholds=AlertThresholds.model_validate(config.alerts), pauses=pauses)
    recorder.remedies["collapse"] = rewind_hint(run.name, config)
    recorder.forks = True  # every alert's step is checkpointed (engine.step): a fork's starting point
    return recorder


def pin_checkpoint(session: Session, step: int, reason: str) -> None:
    """A checkpoint of step ``step`` kept whatever ``--keep-checkpoints`` says (an alert's step,
    the step before a reward edit or setting change): the one on the schedule, if the step
    has it, recorded again with ``reason``, else a new one."""
    stored = [c for c in session.writer.checkpoints(session.run_id) if c["step"] == step]
    if stored:
        session.writer.write_checkpoint(session.run_id, step, stored[-1]["path"], reason)
    else:
        checkpoint(session, step, reason)


def rewind_hint(name: str, config: RunConfig) -> str:
    """The command that rewinds a collapsed run: its best checkpoint, a tenth of its
    learning rate, and a warm-up (the best may be the run's start, where the
    optimizer is fresh and its first, sign-like Adam steps move every weight by
    the whole rate; from a later checkpoint, past step 10, it changes nothing)."""
    return (f"rewind: rlab fork {name}@best --name {name}-rewind --lr {config.lr / 10:g} --lr-warmup-steps 10 "
            f"--db {config.db}")


def checkpoint(session: Session, step: int, reason: str | None = None) -> Path:
    """Weights (or LoRA adapter), optimizer and RNG state under the run dir; recorded in the
    store, with ``reason`` when taken off the schedule (then never pruned: ``train.retention``)."""
    path = session.files / "checkpoints" / f"step-{step:06d}"
    try:
        save_checkpoint(path, session.parts.policy.model, session.parts.trainer.optimizer, step,
                        rng_state=session.rng.getstate())
    except CheckpointError as err:  # the advice, with this run's own resume command
        raise CheckpointError(str(err).replace(
            "--resume NAME", f"`rlab run --headless --resume {session.name} --db {session.config.db}")
            .replace("--keep-checkpoints 1", "--keep-checkpoints 1`")) from None
    session.writer.write_checkpoint(session.run_id, step, path, reason)
    prune_checkpoints(session.writer, session.run_id, session.config.keep_checkpoints)
    return path
