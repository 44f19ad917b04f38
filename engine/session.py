"""A run's session: everything the training loop holds, built new or resumed.

:func:`start` opens a run: the scenario, the policy (LoRA if asked), the
trainer, the sampler (the policy itself, or a vLLM server), the judge, the
run's own copy of the reward file, and its rows in the run file. With
``config.resume`` it reopens a stored run from its last checkpoint instead.
See docs/architecture.md for where this sits in a step.
"""

from __future__ import annotations

import functools
import random
import shutil
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from rlab.engine.alerts import AlertThresholds
from rlab.engine.config import RunConfig
from rlab.engine.manifest import build_manifest
from rlab.engine.policy.device import set_cpu_threads, training_options
from rlab.engine.policy.lora import LoraSettings, apply_lora
from rlab.engine.policy.model import Policy, default_device
from rlab.engine.policy.smollm2 import real_model_defaults, resolve_model
from rlab.engine.policy.vllm import VLLMBackend
from rlab.engine.policy.vllm_launch import ServeSettings, ServerProcess, find_vllm_python, launch, lora_rank_limit
from rlab.engine.policy.vllm_pool import VLLMPool, split_urls
from rlab.engine.recorder import Pauses, Recorder, RunRef
from rlab.engine.rewards.edit.timeline import resume_versions, reward_plan
from rlab.engine.rewards.judge.ruler import RulerJudge
from rlab.engine.rewards.rubric import Rubric, load_rubric
from rlab.engine.rewards.scoring_process import ProcessRubric, RubricVersion, ScoringProcess
from rlab.engine.rewards.signatures import log_reward_styles
from rlab.engine.rollout.play import Rollout
from rlab.engine.train.checkpoint import load_checkpoint, save_checkpoint
from rlab.engine.train.retention import prune_checkpoints
from rlab.engine.train.trainer import TrainConfig, Trainer
from rlab.engine.train.warm_start import ensure_tiny_model
from rlab.engine.success import SuccessRule
from rlab.engine.types import Example, Scenario
from rlab.scenarios import load_scenario
from rlab.store.reader import StoreReader, resolve_run
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
        """Close the vLLM connections and stop the server this run started, if any."""
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
    first_step: 1, or the step after the checkpoint a resumed run restarts
    from. rng: draws each step's prompts (its state is checkpointed).
    """

    config: RunConfig
    scenario: Scenario
    parts: Parts
    rewards: RunRewards
    recorder: Recorder
    first_step: int
    rng: random.Random

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

    def close(self) -> None:
        """Stop what the run started: its servers, its scoring process, its writer."""
        self.parts.close_servers()
        self.rewards.scoring.close()
        self.writer.close()


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _build(config: RunConfig, scenario: Scenario, model_dir: Path) -> Parts:
    """Policy (with LoRA if asked), trainer, sampler (hf or vLLM), rollout and judge.

    Raises:
        ValueError: --backend vllm without LoRA.
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
    autocast = training_options(policy.model, policy.device,
                                gradient_checkpointing=config.gradient_checkpointing, bf16=config.bf16)
    trainer = Trainer(policy.model, policy.pad_id, TrainConfig.from_run(config), autocast=autocast)
    vllm, server = None, None
    if config.backend == "vllm":
        if not config.lora_rank:
            raise ValueError("--backend vllm trains a LoRA adapter: pass --lora-rank N (e.g. 16)")
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


def start(config: RunConfig) -> Session:
    """Open a new run (or resume one): model, rubric, store rows, trainer.

    A new run's row is written only once its inputs have loaded (scenario,
    model, reward file, success function): a start that fails leaves no run
    behind that ``rlab runs`` or ``rlab watch`` would misread.

    Raises:
        rlab.scenarios.UnknownScenarioError, rlab.engine.policy.model.ModelLoadError,
        OSError (unwritable DB path), rlab.engine.rewards.rubric_errors.RubricError,
        rlab.engine.success.SuccessError, ValueError (inconsistent options).
    """
    scenario = load_scenario(config.scenario, config.task)
    if config.resume is not None:
        return _resume(config, StoreWriter(config.db, enabled=config.store), config.resume)
    config = config.with_run_defaults(scenario.run_defaults)
    model_dir = resolve_model(config.model) if config.model is not None else ensure_tiny_model(scenario, seed=config.seed)
    config = real_model_defaults(config, model_dir)
    _seed_everything(config.seed)
    parts = _build(config, scenario, model_dir)
    try:
        return _open_run(config, scenario, model_dir, parts)
    except BaseException:
        if parts.server is not None:
            parts.server.stop()
        raise


def _open_run(config: RunConfig, scenario: Scenario, model_dir: Path, parts: Parts) -> Session:
    """The new run's files and store rows, once its reward file and success function check out."""
    name = config.name or f"{scenario.name}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"
    files = run_dir(config.db, name)
    files.mkdir(parents=True, exist_ok=True)
    reward_file = files / "rewards.py"
    shutil.copyfile(scenario.reward_file, reward_file)
    rubric = load_rubric(reward_file)  # the scenario's own file, trusted; edits run only in child processes
    log_reward_styles(rubric)
    success = SuccessRule.of(scenario, config)
    success.check(rubric.weights, str(scenario.reward_file))
    stored = config.model_dump(mode="json") | {"name": name, "reward_file": str(reward_file),
                                               "model_dir": str(model_dir), "success": success.function,
                                               "success_threshold": success.threshold,
                                               "alerts_by": "engine"}  # the TUI shows its alert events
    manifest = build_manifest(scenario=scenario, config=config,
                              chat_template=parts.policy.tokenizer.chat_template,
                              reward_source=rubric.source, success=success.label, model_dir=model_dir)
    manifest["config"] = stored  # the resolved options (flags over run config over task defaults)
    writer = StoreWriter(config.db, enabled=config.store)
    run_id = writer.start_run(name, scenario.name, stored, manifest, reward_file=reward_file)
    parts.with_events(writer, run_id)
    writer.write_reward_version(run_id, 1, rubric.source, rubric.weights)
    warning = success.warning(rubric.weights)
    if warning is not None:
        print(f"rlab: warning: {warning}", file=sys.stderr, flush=True)
        writer.write_event(run_id, "warning", {"warning": warning}, step=0)
    scoring = ScoringProcess()
    return Session(config=config, scenario=scenario, parts=parts,
                   rewards=RunRewards(reward_file, ProcessRubric(rubric, scoring), scoring),
                   recorder=recorder_of(config, RunRef(writer, run_id, name), success, rubric.weights),
                   first_step=1, rng=random.Random(config.seed))


def _resume(config: RunConfig, writer: StoreWriter, run: str) -> Session:
    reader = StoreReader(config.db)
    found = resolve_run(reader, run)
    info = writer.resume_run(found["id"])
    stored = info["config"]
    saved = RunConfig.model_validate({k: v for k, v in stored.items() if k in RunConfig.model_fields})
    merged = saved.model_copy(update={"max_steps": config.max_steps, "max_seconds": config.max_seconds,
                                      "resume": config.resume, "db": config.db, "store": config.store})
    scenario = load_scenario(merged.scenario, merged.task)
    parts = _build(merged, scenario, Path(stored["model_dir"])).with_events(writer, found["id"])
    rng = random.Random(merged.seed)
    _seed_everything(merged.seed)  # a resume from before the first checkpoint starts as the run did
    first_step = 1
    if info["checkpoint"]:
        resumed = load_checkpoint(info["checkpoint"]["path"], parts.policy.model, parts.trainer.optimizer)
        rng.setstate(_as_rng_state(resumed.rng_state))
        first_step = resumed.step + 1
        if parts.vllm is not None:
            parts.vllm.sync_policy(parts.policy.model, resumed.step, run_dir(merged.db, found["name"]) / "adapters")
    reward_file = Path(stored["reward_file"])
    # Stored (possibly user-edited) versions never run here: the scoring process loads them.
    versions = {v["version"]: RubricVersion(v["source"], v["weights"], reward_file.name)
                for v in reader.reward_versions(found["id"])}
    version, replays = resume_versions(reward_plan(reader.events(found["id"])), first_step - 1)
    rubric = versions.get(version) or load_rubric(reward_file)
    scoring = ScoringProcess()
    run_ref = RunRef(writer, found["id"], found["name"])
    return Session(config=merged, scenario=scenario, parts=parts,
                   rewards=RunRewards(reward_file, ProcessRubric(rubric, scoring), scoring,
                                      [(step, v, versions[v]) for step, v in replays if v in versions]),
                   recorder=recorder_of(merged, run_ref, SuccessRule.of(scenario, merged), rubric.weights, version),
                   first_step=first_step, rng=rng)


def recorder_of(config: RunConfig, run: RunRef, success: SuccessRule, weights: dict[str, float],
                version: int = 1) -> Recorder:
    """The run's recorder: its ``--alert`` thresholds, its success rule and what pauses it."""
    pauses = Pauses(reward_error=config.pause_on_reward_error,
                    judge_failure=config.judge is not None and config.judge.on_failure == "pause")
    return Recorder(run, success=success, weights=weights, version=version,
                    thresholds=AlertThresholds.model_validate(config.alerts), pauses=pauses)


def _as_rng_state(state: list | tuple) -> tuple:
    """``random.Random.setstate`` needs tuples; a checkpoint may hand back lists."""
    version, internal, gauss = state
    return version, tuple(internal), gauss


def checkpoint(session: Session, step: int) -> Path:
    """Weights (or LoRA adapter), optimizer and RNG state under the run dir; recorded in the store."""
    path = session.files / "checkpoints" / f"step-{step:06d}"
    save_checkpoint(path, session.parts.policy.model, session.parts.trainer.optimizer, step,
                    rng_state=session.rng.getstate())
    session.writer.write_checkpoint(session.run_id, step, path)
    prune_checkpoints(session.writer, session.run_id, session.config.keep_checkpoints)
    return path
