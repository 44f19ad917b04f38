"""Forks and resumes: a run reopened from a checkpoint, with the options that may change there.

A fork is a new run from another run's checkpoint, so a change is tested
against the run that did not get it.

``rlab fork RUN@STEP --name NEW [options] [--rewards FILE]`` (``rlab run
--fork-from RUN@STEP``) starts a run in the same run file from RUN's
checkpoint: its weights, optimizer state, RNG state and the reward version
in force at STEP, with the settings in force then (``engine.settings``) and
the options given changed. The parent is not touched; both may run at once.
The fork numbers its steps on from STEP + 1, so the two branches line up by
step on the plots and in ``rlab compare PARENT FORK --from-step STEP``.

A resume (``rlab run --resume RUN``) continues RUN itself from its last
checkpoint (a fork without one of its own: from its parent's) with the
settings each re-run step first ran with, and takes only the options
``engine.settings.ON_RESUME`` lists.

This module plans both from the run file (no torch: the CLI checks them
before any model loads); ``engine.start`` builds their sessions.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlab.engine.config import RunConfig
from rlab.engine.manifest import SAMPLING_FIELDS, scorer_fields, sha256_json
from rlab.engine.rewards.edit.timeline import reward_plan
from rlab.engine.settings import ON_RESUME, changed, config_at, settings_plan, stored_options
from rlab.store.reader import StoreReader, resolve_run
from rlab.store.rows import RunRow

#: Steps a checkpoint reference may name besides a number.
NAMED_STEPS = ("best", "latest")


@dataclass(frozen=True)
class CheckpointRef:
    """A stored checkpoint: the run that wrote it (its row: config, manifest),
    its step and directory."""

    run: RunRow
    step: int
    path: Path

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
    or ``RUN@best`` (the best held-out pass@1 among the steps that have a checkpoint).

    Raises:
        FileNotFoundError: no run file at ``db``.
        KeyError: no such run.
        ValueError: a bad step, no checkpoint at that step, or none at all
            (each message names ``flag``, the run's checkpoints and the fix).
    """
    run, _, step_text = spec.partition("@")
    if step_text and not step_text.isdigit() and step_text not in NAMED_STEPS:
        raise ValueError(f"{flag} {spec!r}: the step after @ must be a number (a checkpoint's step), best or latest, "
                         f"e.g. {run}@50")
    if not db.is_file():
        raise FileNotFoundError(f"no run file at {db}; pass --db PATH")
    with StoreReader(db) as reader:
        row = resolve_run(reader, run)
        stored = reader.checkpoints(row["id"])
    if not stored:
        raise ValueError(f"{flag} {spec}: run {row['name']!r} has no checkpoint yet; train it past "
                         "--checkpoint-every steps")
    steps = ", ".join(str(c["step"]) for c in stored)
    if step_text == "best":
        scored = [c for c in stored if c["eval"] is not None]
        if not scored:
            raise ValueError(f"{flag} {spec}: none of run {row['name']!r}'s checkpoints (steps {steps}) has a "
                             "held-out eval at its step; name a step, or let --eval-every divide --checkpoint-every")
        chosen = max(scored, key=lambda c: (c["eval"], c["step"]))
    elif step_text.isdigit():
        matches = [c for c in stored if c["step"] == int(step_text)]
        if not matches:
            raise ValueError(f"{flag} {spec}: run {row['name']!r} has no checkpoint at step {step_text}; "
                             f"its checkpoints: {steps}")
        chosen = matches[-1]
    else:
        chosen = stored[-1]
    return CheckpointRef(row, chosen["step"], Path(chosen["path"]))


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
                "checkpoint": str(self.point.path), "changes": self.changes,
                "rewards": None if rewards is None else str(rewards.resolve()),
                "reward_version": self.reward_version + (rewards is not None)}


def plan_fork(config: RunConfig) -> ForkPlan:
    """The fork ``config`` asks for (``config.fork_from``, ``config.name`` and
    the options it was given, ``config.model_fields_set``).

    Raises:
        FileNotFoundError, KeyError, ValueError: as :func:`find_checkpoint`.
        rlab.engine.settings.SettingsError: an option a fork cannot change,
            a refused value, or no ``--name``.
    """
    from rlab.engine.settings import SettingsError

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
    version = [v for first, v in reward_plan(events) if first <= point.step][-1]
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

    run: the stored run. point: (step, directory) of the checkpoint it
    continues from, or None (from the start). config: the options in force
    at its first step, the given ones changed. changes: option -> new value.
    settings_version: the run's setting changes in force at its first step.
    replays: later changes, ``(step, changes)``, made again at their steps.
    events: the run's events (the reward versions' timeline).
    """

    run: RunRow
    point: tuple[int, Path] | None
    config: RunConfig
    changes: dict[str, Any]
    settings_version: int
    replays: list[tuple[int, dict[str, Any]]]
    events: list[dict[str, Any]]

    @property
    def first_step(self) -> int:
        """The first step the resume runs."""
        return 1 if self.point is None else self.point[0] + 1


def plan_resume(config: RunConfig) -> ResumePlan:
    """The resume ``config`` asks for (``config.resume`` and the options it was given).

    Raises:
        KeyError: no such run. rlab.engine.settings.SettingsError: an option
            a resume does not change, or a value RunConfig refuses.
    """
    assert config.resume is not None
    with StoreReader(config.db) as reader:
        run = resolve_run(reader, config.resume)
        own = reader.checkpoints(run["id"])
        events = [dict(e) for e in reader.events(run["id"])]
    lineage = run["config"].get("fork")
    point = (own[-1]["step"], Path(own[-1]["path"])) if own else \
        (int(lineage["step"]), Path(lineage["checkpoint"])) if lineage else None
    first = 1 if point is None else point[0] + 1
    plan = settings_plan(events)
    in_force, version = config_at(stored_options(run), plan, first)
    given = {name: getattr(config, name) for name in config.model_fields_set - RUN_IDENTITY}
    resumed, changes = changed(in_force, given, ON_RESUME, refusal=(
        f"a resume continues the run as it was; to change more, fork it: rlab fork {run['name']}@latest "
        f"--name {run['name']}-b ..."))
    resumed = resumed.model_copy(update={"resume": config.resume, "db": config.db, "store": config.store,
                                         "fork_from": None})
    return ResumePlan(run, point, resumed, changes, version, [(s, ch) for s, ch in plan if s > first], events)
