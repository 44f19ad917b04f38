"""Open a run: a new one, a resume of a stored one, or a fork of one (``engine.run.fork``).

:func:`start` builds the run's :class:`~rlab.engine.run.session.Session`: the
scenario, the policy (LoRA if asked), the trainer, the sampler, the judge,
the run's own copy of the reward file and its rows in the run file.

- A new run's row is written only once its inputs have loaded (scenario,
  model, reward file, success function), so a start that fails leaves no
  run behind.
- ``--resume RUN`` reopens RUN from its last checkpoint with the settings
  and reward version each re-run step first ran with; of the options given
  it takes those ``engine.run.settings.ON_RESUME`` lists, recorded as a
  ``settings`` change at its first step. It takes the run over (status
  ``running``, later steps superseded) only once its checkpoint and model
  have loaded, so a resume that fails leaves the run as it was.
- ``--fork-from RUN@STEP`` starts a new run from RUN's checkpoint with the
  options given changed; its row, lineage and reward versions are written in
  one transaction once the checkpoint has loaded.

Each opener loads inside :func:`_closing_on_failure` (a failure stops the
servers and the tool process it started) and hands :func:`_session` what
the three share: the stored options, the reward file and the scoring process.
"""

from __future__ import annotations

import random
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlab.engine.run.config import RunConfig
from rlab.engine.run.fork import ForkPlan, ResumePlan, forked_manifest, plan_fork, plan_resume
from rlab.engine.run.manifest import build_manifest
from rlab.engine.policy.device import set_cpu_threads
from rlab.engine.paths import default_run_name
from rlab.engine.policy.smollm2 import real_model_defaults, resolve_model
from rlab.engine.recorder import RunRef
from rlab.engine.rewards.edit.check import validate
from rlab.engine.rewards.edit.timeline import resume_versions, reward_plan
from rlab.engine.rewards.rubric import Rubric, load_rubric
from rlab.engine.rewards.rubric_errors import RubricError
from rlab.engine.rewards.scoring_process import ProcessRubric, RubricVersion, ScoringProcess
from rlab.engine.rewards.signatures import log_reward_styles
from rlab.engine.run.session import Parts, RunRewards, Session, build_parts, recorder_of, run_dir
from rlab.engine.rewards.success import SuccessRule
from rlab.engine.train.building import building
from rlab.engine.train.checkpoint import CheckpointError, load_checkpoint
from rlab.engine.train.adapter_warm_start import warm_start_adapter
from rlab.engine.train.warm_start import ensure_tiny_model, tool_schemas
from rlab.engine.types import Scenario, ToolScenario
from rlab.scenarios import load_scenario
from rlab.store.errors import UsageError
from rlab.store.reader import StoreReader
from rlab.store.writer import StoreWriter


def start(config: RunConfig) -> Session:
    """Open a new run, or resume or fork a stored one (see the module doc).

    Raises:
        rlab.store.errors.UsageError: a user's error, its message naming the fix (every one
            derives from it): an unknown scenario or task, a model or checkpoint that does not
            load, a bad reward file or success function, an option a resume or fork may not
            change, no such run or checkpoint, inconsistent options.
        OSError: an unwritable run-file path.
    """
    if config.fork_from is not None:
        return _fork_once_more(config)
    if config.resume is not None:
        return _resume(plan_resume(config))
    scenario = load_scenario(config.scenario, config.task)
    config = config.with_run_defaults(scenario.run_defaults)
    config = config.model_copy(update={"name": config.name or default_run_name(scenario.name)})
    if config.model is not None:
        model_dir = resolve_model(config.model)
        config = real_model_defaults(config, model_dir)
        _check_warm_start(config, scenario)
    else:
        _check_warm_start(config, scenario)  # before a build of minutes
        set_cpu_threads(config.threads, tiny_policy=True, building=True)  # build_parts sets the run's own
        with building(config.db, str(config.name)):  # rlab stop and the TUI's quit find a build of minutes
            model_dir = ensure_tiny_model(scenario, seed=config.seed)
    _seed_everything(config.seed)
    parts = build_parts(config, scenario, model_dir)
    return _closing_on_failure(parts, lambda: _open_run(config, scenario, model_dir, parts,
                                                        _warm_start(config, scenario, model_dir, parts)))


def _warm_start(config: RunConfig, scenario: Scenario, model_dir: Path, parts: Parts) -> dict[str, Any] | None:
    """A real model's warm start on the task's demonstrations (``engine.train.adapter_warm_start``),
    as the manifest records it: ``{"on": False}`` under ``--no-warm-start``, None where there is
    none to choose (the tiny policy, a task without demonstrations; :func:`_check_warm_start`
    refused the options that ask for one there)."""
    if not _warm_starts(config, scenario):
        return None
    if not config.warm_start:
        return {"on": False}
    assert isinstance(scenario, ToolScenario)
    tools = parts.rollout.tools.schemas if parts.rollout.tools is not None else tool_schemas(scenario)
    with building(config.db, str(config.name)):  # rlab stop and the TUI's quit find it, as a tiny build
        warm = warm_start_adapter(parts.policy, scenario, config, model_dir, tools, parts.trainer.autocast)
    return warm.manifest()


def _warm_starts(config: RunConfig, scenario: Scenario) -> bool:
    """Whether the run has a warm start to choose: a real model on a tool task with demonstrations."""
    return config.model is not None and isinstance(scenario, ToolScenario) and bool(scenario.demonstrations(config.seed))


def _check_warm_start(config: RunConfig, scenario: Scenario) -> None:
    """Refuse warm-start options that cannot apply, before any model is built or loaded.

    Raises:
        UsageError: ``--warm-start-steps`` where no warm start runs; a warm start without LoRA.
    """
    if not _warm_starts(config, scenario):
        if config.warm_start_steps is not None:
            raise UsageError("--warm-start-steps sets a real model's warm start (--model) on a tool task with "
                             "demonstrations or transcripts" + (
                                 "; the tiny policy is built for task.toml's warm_start_steps" if config.model is None
                                 else f"; task {scenario.name} has neither: add transcripts = \"FILE.jsonl\" "
                                      "to its task.toml"))
    elif config.warm_start and not config.lora_rank:
        raise UsageError("a real model's warm start trains its LoRA adapter: pass --lora-rank N (e.g. 16), "
                         "or --no-warm-start")


def _closing_on_failure(parts: Parts, opening: Callable[[], Session]) -> Session:
    """``opening()``, stopping the servers ``parts`` started when it fails (the run never began)."""
    try:
        return opening()
    except BaseException:
        parts.close_servers()
        raise


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _open_run(config: RunConfig, scenario: Scenario, model_dir: Path, parts: Parts,
              warm_start: dict[str, Any] | None) -> Session:
    """The new run's files and store rows, once its reward file and success function check out."""
    name = str(config.name)  # chosen in start(), before a build, so the build is found by it
    files = run_dir(config.db, name)
    files.mkdir(parents=True, exist_ok=True)
    reward_file = files / "rewards.py"
    shutil.copyfile(config.rewards or scenario.reward_file, reward_file)
    # the scenario's own file is trusted; a --rewards file and every edit run only in child processes
    rubric = load_rubric(reward_file) if config.rewards is None else _checked_file(reward_file)
    if config.rewards is None:
        log_reward_styles(rubric)
    success = SuccessRule.of(scenario, config)
    success.check(rubric.weights, str(config.rewards or scenario.reward_file))
    stored = _stored_options(config, name, reward_file, model_dir, success)
    tools = parts.rollout.tools
    manifest = build_manifest(scenario=scenario, config=config,
                              chat_template=parts.policy.tokenizer.chat_template,
                              reward_source=rubric.source, success=success.label, model_dir=model_dir,
                              tools=None if tools is None else tools.schemas)  # a bad tools file stops here
    manifest["config"] = stored  # the resolved options (flags over run config over task defaults)
    if warm_start is not None:
        manifest["warm_start"] = warm_start
    if parts.rollout.agent is not None:
        manifest["agent"] = parts.rollout.agent.check()  # a rollout file that cannot run stops here
    writer = StoreWriter(config.db, enabled=config.store)
    run_id = writer.start_run(name, scenario.name, stored, manifest, reward_file=reward_file)
    writer.write_reward_version(run_id, 1, rubric.source, rubric.weights)
    warning = success.warning(rubric.weights)
    if warning is not None:
        print(f"rlab: warning: {warning}", file=sys.stderr, flush=True)
        writer.write_event(run_id, "warning", {"warning": warning}, step=0)
    return _session(config, scenario, parts, RunRef(writer, run_id, name), reward_file, rubric, success,
                    first_step=1, rng=random.Random(config.seed))


def _stored_options(config: RunConfig, name: str, reward_file: Path, model_dir: Path, success: SuccessRule,
                    **more: Any) -> dict[str, Any]:
    """The run row's ``config``: the resolved options, the run's reward file and model,
    its success rule, and ``more`` (a fork's lineage)."""
    return config.model_dump(mode="json") | {
        "name": name, "reward_file": str(reward_file), "model_dir": str(model_dir), "success": success.function,
        "success_threshold": success.threshold, "alerts_by": "engine", **more}  # the TUI shows its alert events


def _session(config: RunConfig, scenario: Scenario, parts: Parts, run: RunRef, reward_file: Path,
             rubric: RubricVersion | Rubric, success: SuccessRule, *, first_step: int, rng: random.Random,
             version: int = 1, replays: list[tuple[int, int, RubricVersion]] | None = None) -> Session:
    """The session of an opened run (its rows written): its reward version ``version`` scoring
    in a fresh scoring process, its recorder, and the dropped-server events going to its rows."""
    parts.with_events(run.writer, run.run_id)
    scoring = ScoringProcess()
    return Session(config=config, scenario=scenario, parts=parts,
                   rewards=RunRewards(reward_file, ProcessRubric(rubric, scoring), scoring, replays or []),
                   recorder=recorder_of(config, run, success, rubric.weights, version),
                   first_step=first_step, rng=rng)


def _checked_file(path: Path) -> RubricVersion:
    """A user's reward file as a version, once it loaded in a check process (never in this one).

    Raises:
        RubricError: it does not load (the message says where).
    """
    source = path.read_text(encoding="utf-8")
    result = validate(source, [], [], filename=path.name)
    if not result.ok:
        raise RubricError(f"{path}: {result.message}", kind="exception", lineno=result.lineno)
    return RubricVersion(source, result.weights, path.name)


def _resume(plan: ResumePlan) -> Session:
    """Reopen a stored run from its checkpoint (``engine.run.fork.plan_resume``)."""
    config = plan.config
    scenario = load_scenario(config.scenario, config.task)
    parts = build_parts(config, scenario, Path(plan.run["config"]["model_dir"]))
    return _closing_on_failure(parts, lambda: _reopen(plan, scenario, parts))


def _reopen(plan: ResumePlan, scenario: Scenario, parts: Parts) -> Session:
    """The resumed run's session: its checkpoint loaded first, the run taken over last."""
    config, found = plan.config, plan.run
    with StoreReader(config.db) as reader:
        stored = reader.reward_versions(found["id"])
    reward_file = Path(found["config"]["reward_file"])
    # Stored (possibly user-edited) versions never run here: the scoring process loads them.
    versions = {v["version"]: RubricVersion(v["source"], v["weights"], reward_file.name) for v in stored}
    rng = random.Random(config.seed)
    _seed_everything(config.seed)  # a resume from before the first checkpoint starts as the run did
    if plan.point.path is not None:
        resumed = load_checkpoint(plan.point.path, parts.policy.model, parts.trainer.optimizer)
        rng.setstate(_as_rng_state(resumed.rng_state))
        if parts.vllm is not None:
            parts.vllm.sync_policy(parts.policy.model, resumed.step, run_dir(config.db, found["name"]) / "adapters")
    version, replays = resume_versions(reward_plan(plan.events), plan.first_step - 1)
    rubric = versions.get(version) or load_rubric(reward_file)
    writer = StoreWriter(config.db, enabled=config.store)
    writer.resume_run(found["id"])  # last: until here the run's status and rows are as they were
    session = _session(config, scenario, parts, RunRef(writer, found["id"], found["name"]), reward_file, rubric,
                       SuccessRule.of(scenario, config), first_step=plan.first_step, rng=rng, version=version,
                       replays=[(step, v, versions[v]) for step, v in replays if v in versions])
    session.settings_replays = plan.replays
    session.recorder.settings_version = plan.settings_version
    session.recorder.settings_versions_made = plan.settings_versions_made
    if plan.changes:
        session.recorder.switch_settings(plan.first_step, plan.changes)
    return session


def _fork_once_more(config: RunConfig) -> Session:
    """A fork; planned again, once, when the parent pruned its checkpoint while the fork read it
    (``RUN@latest`` or ``@best`` then name a newer one; a step named outright is refused as gone)."""
    plan = plan_fork(config)
    try:
        return _fork(plan)
    except CheckpointError:
        if plan.point.path is None or plan.point.path.is_dir():
            raise  # damaged, not pruned: the error says what is wrong
        print(f"rlab: the parent pruned checkpoint {plan.point.run_name}@{plan.point.step} while this fork read it; "
              "looking for the fork point again", file=sys.stderr, flush=True)
        return _fork(plan_fork(config))


def _fork(plan: ForkPlan) -> Session:
    """A new run from the parent's checkpoint (``engine.run.fork``); its rows are written last, in one transaction."""
    config, parent = plan.config, plan.point.run
    scenario = load_scenario(config.scenario, config.task)
    model_dir = Path(parent["config"]["model_dir"])
    _seed_everything(config.seed)  # from a run's start, as that run began; a checkpoint restores its own
    parts = build_parts(config, scenario, model_dir)
    return _closing_on_failure(parts, lambda: _open_fork(plan, scenario, model_dir, parts))


def _open_fork(plan: ForkPlan, scenario: Scenario, model_dir: Path, parts: Parts) -> Session:
    config, point = plan.config, plan.point
    assert config.name is not None
    rng = random.Random(config.seed)
    if point.path is not None:
        resumed = load_checkpoint(point.path, parts.policy.model, parts.trainer.optimizer)
        if "seed" in plan.changes:  # the same checkpoint, another draw of prompts and samples
            _seed_everything(config.seed)
        else:
            rng.setstate(_as_rng_state(resumed.rng_state))
    with StoreReader(config.db) as reader:
        kept = [RubricVersion(v["source"], v["weights"], "rewards.py") for v in reader.reward_versions(point.run["id"])
                if v["version"] <= plan.reward_version]
    rubric = kept[-1] if config.rewards is None else _checked_file(config.rewards)
    versions = kept + ([rubric] if config.rewards is not None else [])
    success = SuccessRule.of(scenario, config)
    success.check(rubric.weights, str(config.rewards or "the parent's reward file"))
    files = run_dir(config.db, config.name)
    files.mkdir(parents=True, exist_ok=True)
    reward_file = files / "rewards.py"
    reward_file.write_text(rubric.source, encoding="utf-8")
    stored = _stored_options(config, config.name, reward_file, model_dir, success, fork=plan.lineage(config.rewards))
    manifest = forked_manifest(point.run["manifest"], config, rubric.source, success.label) | {"config": stored}
    writer = StoreWriter(config.db, enabled=config.store)
    run_id = writer.start_fork(config.name, scenario.name, stored, manifest, reward_file=reward_file,
                               parent_id=point.run["id"], step=point.step, pinned=point.stored,
                               reward_versions=[(k + 1, v.source, v.weights) for k, v in enumerate(versions)])
    if parts.vllm is not None:
        parts.vllm.sync_policy(parts.policy.model, point.step, files / "adapters")
    return _session(config, scenario, parts, RunRef(writer, run_id, config.name), reward_file,
                    RubricVersion(rubric.source, rubric.weights, reward_file.name), success,
                    first_step=point.step + 1, rng=rng, version=len(versions))


def _as_rng_state(state: list | tuple) -> tuple:
    """``random.Random.setstate`` needs tuples; a checkpoint may hand back lists."""
    version, internal, gauss = state
    return version, tuple(internal), gauss
