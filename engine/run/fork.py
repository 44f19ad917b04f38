"""Forks and resumes: a run reopened from a checkpoint, with the options that may change there.

A fork is a new run from another run's checkpoint, so a change is tested
against the run that did not get it.

``rlab fork RUN@STEP --name NEW [options] [--rewards FILE]`` (``rlab run
--fork-from RUN@STEP``) starts a run in the same run file from RUN's
checkpoint: its weights, optimizer state, RNG state and the reward version
in force at STEP, with the settings in force then (``engine.run.settings``) and
the options given changed. The parent is not touched; both may run at once.
The fork numbers its steps on from STEP + 1, so the two branches line up by
step on the plots and in ``rlab compare PARENT FORK --from-step STEP``.

A resume (``rlab run --resume RUN``) continues RUN itself from its last
checkpoint (a fork without one of its own: from its parent's) with the
settings each re-run step first ran with, and takes only the options
``engine.run.settings.ON_RESUME`` lists.

This module plans both from the run file (no torch: the CLI checks them
before any model loads); ``engine.run.start`` builds their sessions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlab.engine.run.config import RunConfig
from rlab.engine.run.manifest import SAMPLING_FIELDS, scorer_fields, sha256_json
from rlab.engine.rewards.edit.timeline import reward_plan
from rlab.engine.run.settings import ON_RESUME, SettingsChange, changed, config_at, settings_plan, stored_options
from rlab.store.db import existing_run_file
from rlab.store.errors import UsageError
from rlab.store.reader import StoreReader, resolve_run
from rlab.store.rows import RunRow
from rlab.store.writer import refuse_if_busy

#: Steps a checkpoint reference may name besides a number.
NAMED_STEPS = ("best", "latest")


@dataclass(frozen=True)
class CheckpointRef:
    """A point a run can be reopened from: the run that wrote it (its row: config,
    manifest), its step, and its directory. ``path`` None is a new run's start
    (step 0): its base weights, a fresh optimizer and its seed's RNG.
    ``stored``: a checkpoint row of this run (False: its start)."""

    run: RunRow
    step: int
    path: Path | None
    stored: bool = True

    @property
    def run_name(self) -> str:
        """The name of the run that wrote it."""
        return self.run["name"]

    @property
    def config(self) -> dict[str, Any]:
        """That run's stored config (base model directory, LoRA settings)."""
        return self.run["config"]


def find_checkpoint(db: Path, spec: str, *, flag: str = "--checkpoint") -> CheckpointRef:
    """The checkpoint ``spec`` names: ``RUN`` (its last), ``RUN@STEP``, ``RUN@latest``
    or ``RUN@best`` (the best held-out pass@1 among the steps that have a checkpoint,
    the run's start included: a run that collapsed on its first steps rewinds to it).

    A run's start is a point too: step 0 of a new run (its base weights), a
    fork's fork step (its parent's checkpoint).

    Raises:
        FileNotFoundError: no run file at ``db``.
        KeyError: no such run.
        ValueError: a bad step, or no checkpoint at that step (each message
            names ``flag``, the run's checkpoints and the fix).
    """
    run, at, step_text = spec.partition("@")
    if at and not (step_text.isascii() and step_text.isdigit()) and step_text not in NAMED_STEPS:  # RUN@ too
        raise UsageError(f"{flag} {spec!r}: the step after @ must be a number (a checkpoint's step), best or latest, "
                         f"e.g. {run}@50")
    existing_run_file(db)
    with StoreReader(db) as reader:
        row = resolve_run(reader, run)
        stored = [CheckpointRef(row, c["step"], Path(c["path"])) for c in reader.checkpoints(row["id"])]
        evals = {m["step"]: m.get("eval/pass_at_1") for m in reader.step_metrics(row["id"])}
    start = _start(row)
    points = ([start] if all(c.step != start.step for c in stored) else []) + stored
    if step_text == "best":
        scored = [c for c in points if evals.get(c.step) is not None]
        if not scored:
            raise UsageError(f"{flag} {spec}: run {row['name']!r} has no held-out eval at any of its checkpoints "
                             f"({_listed(stored, start)}); name a step, or let --eval-every divide --checkpoint-every")
        return max(scored, key=lambda c: (evals[c.step], c.step))
    if step_text.isascii() and step_text.isdigit():
        matches = [c for c in points if c.step == int(step_text)]
        if not matches:
            raise UsageError(f"{flag} {spec}: run {row['name']!r} has no checkpoint at step {step_text}; "
                             f"its checkpoints: {_listed(stored, start)}")
        return matches[-1]
    return points[-1]


def fork_points(run: RunRow, checkpoints: list[dict[str, Any]]) -> list[int]:
    """The steps a fork of ``run`` can start from, ascending: its start (:func:`_start`) and its
    stored ``checkpoints`` (``StoreReader.checkpoints`` rows); none for a run that holds no
    weights (imported from another tool, or an eval)."""
    if run.get("kind") != "train" or not (run.get("config") or {}).get("model_dir"):
        return []
    return sorted({_start(run).step, *(c["step"] for c in checkpoints)})


def _start(run: RunRow) -> CheckpointRef:
    """Where a run began: a fork's parent checkpoint at its fork step, else step 0 (its base weights)."""
    lineage = run["config"].get("fork")
    if lineage and lineage.get("checkpoint"):
        return CheckpointRef(run, int(lineage["step"]), Path(lineage["checkpoint"]), stored=False)
    return CheckpointRef(run, int(lineage["step"]) if lineage else 0, None, stored=False)


def _listed(stored: list[CheckpointRef], start: CheckpointRef) -> str:
    """The checkpoints' steps for a message, each once (a pinned checkpoint is a second row
    of its step's), the start said apart."""
    steps = ", ".join(str(step) for step in sorted({c.step for c in stored})) or "none yet"
    return f"{steps} (and its start, @{start.step})"


@dataclass(frozen=True)
class ForkPlan:
    """What a fork starts from and changes.

    point: the parent's checkpoint. config: the fork's options (the
    parent's in force at the fork step, the given ones changed, its name,
    db and ``fork_from``). changes: option -> new value, those that differ
    from the parent's. reward_version: the parent's version in force at the
    fork step.
    """

    point: CheckpointRef
    config: RunConfig
    changes: dict[str, Any]
    reward_version: int

    def lineage(self, rewards: Path | None) -> dict[str, Any]:
        """The lineage the fork stores (``config["fork"]``, the ``fork`` event, manifest.json)."""
        return {"parent": self.point.run_name, "parent_id": self.point.run["id"], "step": self.point.step,
                "checkpoint": None if self.point.path is None else str(self.point.path), "changes": self.changes,
                "rewards": None if rewards is None else str(rewards.resolve()),
                "reward_version": self.reward_version + (rewards is not None)}


def plan_fork(config: RunConfig) -> ForkPlan:
    """The fork ``config`` asks for (``config.fork_from``, ``config.name`` and
    the options it was given, ``config.model_fields_set``).

    Raises:
        FileNotFoundError, KeyError, ValueError: as :func:`find_checkpoint`.
        rlab.engine.run.settings.SettingsError: an option a fork cannot change,
            a refused value, or no ``--name``.
    """
    from rlab.engine.run.settings import SettingsError

    assert config.fork_from is not None
    if config.name is None:
        raise SettingsError(f"a fork needs a name of its own: pass --name NEW (e.g. --name "
                            f"{config.fork_from.partition('@')[0]}-fork)")
    point = find_checkpoint(config.db, config.fork_from, flag="fork")
    with StoreReader(config.db) as reader:
        events = reader.events(point.run["id"])
    inherited, _ = config_at(stored_options(point.run), settings_plan(events), point.step)
    given = {name: getattr(config, name) for name in config.model_fields_set - RUN_IDENTITY}
    forked, changes = changed(inherited, given, None, refusal="a fork changes any option but the task, the model "
                              "and the LoRA settings")
    forked = forked.model_copy(update={"name": config.name, "db": config.db, "fork_from": config.fork_from,
                                       "resume": None, "rewards": config.rewards})
    if "max_steps" in config.model_fields_set and config.max_steps is not None:
        # a fork's --max-steps counts its own steps; the run's budget is the step it stops after
        forked = forked.model_copy(update={"max_steps": point.step + config.max_steps})
    version = [v for first, v in reward_plan(events) if first <= max(point.step, 1)][-1]  # @0: as step 1 began
    return ForkPlan(point, forked, changes, version)


#: Options that name a run rather than set it: never "changes".
RUN_IDENTITY = frozenset({"name", "db", "fork_from", "resume", "rewards", "config", "store"})


def forked_manifest(parent: dict[str, Any], config: RunConfig, reward_source: str, success: str) -> dict[str, Any]:
    """The parent's manifest with what a fork changes: the scorer (a new reward
    file), sampling, seed and config hash. The dataset, prompt and model
    entries stay, so the branches' held-out evals are in one locked room."""
    return {**parent, "scorer": scorer_fields(reward_source, success),
            "sampling": {name: getattr(config, name) for name in SAMPLING_FIELDS}, "seed": config.seed,
            "files": {**parent.get("files", {}), "config_sha256": sha256_json(config.model_dump(mode="json"))}}


@dataclass(frozen=True)
class ResumePlan:
    """What a resume continues from and changes.

    run: the stored run. point: the checkpoint it continues from (its latest,
    else its start: a fork's parent checkpoint, or step 0). config: the options in force
    at its first step, the given ones changed. changes: option -> new value.
    settings_version: the number of the last setting change in force at its
    first step (0: none). settings_versions_made: the highest number the run
    gave a change, which a new one follows. replays: later changes, made again
    at their steps with their numbers.
    events: the run's events (the reward versions' timeline).
    """

    run: RunRow
    point: CheckpointRef
    config: RunConfig
    changes: dict[str, Any]
    settings_version: int
    settings_versions_made: int
    replays: list[SettingsChange]
    events: list[dict[str, Any]]

    @property
    def first_step(self) -> int:
        """The first step the resume runs."""
        return self.point.step + 1


def plan_resume(config: RunConfig) -> ResumePlan:
    """The resume ``config`` asks for (``config.resume`` and the options it was given).

    Raises:
        KeyError: no such run. rlab.engine.run.settings.SettingsError: an option
            a resume does not change, or a value RunConfig refuses.
    """
    assert config.resume is not None
    point = find_checkpoint(config.db, f"{config.resume}@latest", flag="--resume")
    run = point.run
    refuse_if_busy(run)  # said before the model loads; the takeover checks again under the write lock
    with StoreReader(config.db) as reader:
        events = [dict(e) for e in reader.events(run["id"])]
    first = point.step + 1
    plan = settings_plan(events)
    in_force, version = config_at(stored_options(run), plan, first)
    given = {name: getattr(config, name) for name in config.model_fields_set - RUN_IDENTITY}
    resumed, changes = changed(in_force, given, ON_RESUME, refusal=(
        f"a resume continues the run as it was; to change more, fork it: rlab fork {run['name']}@latest "
        f"--name {run['name']}-b ..."))
    resumed = resumed.model_copy(update={"resume": config.resume, "db": config.db, "store": config.store,
                                         "fork_from": None})
    # an option given on the resume wins over a later step's change of it (a bad value set
    # mid-run must not come back at its step: the resume is how it is overridden)
    later = [c._replace(changes={k: v for k, v in c.changes.items() if k not in given})
             for c in plan if c.from_step > first]
    made = max((c.version for c in plan), default=0)
    return ResumePlan(run, point, resumed, changes, version, made, [c for c in later if c.changes], events)
