"""Which run options may change after a run started, and when: between steps, on a resume, on a fork.

A run's options are fixed at its start, with three ways to change some:

- ``rlab set RUN KEY=VALUE`` between two steps of a live run
  (:data:`BETWEEN_STEPS`, each with the reason it is safe then);
- ``rlab run --resume RUN [options]``: those, plus budgets, checkpointing and
  where the run executes (:data:`ON_RESUME`); a resume continues the run as
  it was, so any other option is refused and a fork suggested;
- ``rlab fork RUN@STEP [options]``: a new run from a checkpoint, where
  every option may change except those the checkpoint fixes (:data:`FIXED_ON_FORK`).

Another trainer takes what its integration declares (:class:`TrainerSettings`,
registered under the ``rlab.trainers`` entry point named after the run's
scenario; TRL's is ``engine.integrations.trl_settings.SETTINGS``), so a third
trainer adds its own entry, not a branch here.

Every change is checked by ``RunConfig``'s own validators (:func:`changed`),
so a value ``rlab run`` refuses is refused here with the same one line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, NamedTuple

from pydantic import ValidationError

from rlab.engine.run.config import RunConfig
from rlab.engine.run.flags import flag, validation_message
from rlab.store.errors import UsageError

#: What ``rlab set`` changes between two steps, and why each is safe there.
BETWEEN_STEPS: dict[str, str] = {
    "lr": "the peak of the learning-rate schedule, as --lr: the next update uses it times the warm-up / "
          "decay factor (the optimizer's moments carry over)",
    "temperature": "the next rollouts sample at it, and the update takes log-probabilities at it, so the "
                   "policy ratio compares like with like",
    "beta": "the KL penalty's weight from the next update; the reference is there (a LoRA run's base model, "
            "or the copy a run keeps when it starts with beta > 0)",
    "max_new_tokens": "the next rollouts' length limit (the held-out evals' too)",
    "prompts_per_step": "how many prompts the next steps draw; advantages are per group, so no statistic "
                        "spans steps",
    "eval_every": "when the next held-out evals run; past ones stay",
    "alerts": "the alerts' thresholds and pause_on; the watch keeps its windows and baselines",
}

#: What ``--resume`` takes besides :data:`BETWEEN_STEPS`: budgets, checkpoints, where the run executes.
ON_RESUME: dict[str, str] = {
    **BETWEEN_STEPS,
    "max_steps": "the budget", "max_seconds": "the budget",
    "checkpoint_every": "when the next checkpoints are written",
    "keep_checkpoints": "how many checkpoints stay on disk",
    "threads": "where the run executes", "device": "where the run executes",
    "vllm_url": "where the run executes", "vllm_python": "where the run executes",
    "report_to": "where the step metrics also go", "report_dir": "where the step metrics also go",
}

#: What a fork cannot change, and why: the checkpoint it starts from fixes it.
FIXED_ON_FORK: dict[str, str] = {
    "scenario": "both branches are measured on one task",
    "task": "both branches are measured on one task",
    "model": "the checkpoint holds this model's weights",
    "lora_rank": "the checkpoint's adapter has this rank",
    "lora_alpha": "the adapter's scale (alpha / rank) is part of the checkpointed policy",
    "lora_targets": "the checkpoint's adapter covers these modules",
    "warm_start": "the checkpoint's adapter holds the warm start its run began with (or not)",
    "warm_start_steps": "the checkpoint's adapter holds the warm start its run began with (or not)",
    "db": "a fork lives in its parent's run file",
    "config": "a fork takes its options from its parent and the command line",
    "resume": "a fork is a new run",
}


class SettingsError(UsageError):
    """A change that is refused: the message is one line naming the option, the rule and the fix."""


def check_prompts(config: RunConfig, available: int, what: str) -> None:
    """The run-time bound RunConfig cannot check alone: a step draws ``prompts_per_step``
    distinct prompts from the ``available`` training prompts of the task (``what``).

    Raises:
        SettingsError: more than there are (the step would fail to draw them).
    """
    if config.prompts_per_step > available:
        raise SettingsError(f"--prompts-per-step {config.prompts_per_step}: {what} has {available} training "
                            f"prompts; pass at most {available}")


def changed(base: RunConfig, given: Mapping[str, Any], allowed: Mapping[str, str] | None, *,
            refusal: str, as_flags: bool = True) -> tuple[RunConfig, dict[str, Any]]:
    """``base`` with the options in ``given`` (values as typed: strings are
    converted by RunConfig), and the options whose value actually changed.

    Args:
        base: the run's options now.
        given: option name -> new value; ``alerts`` merges into the run's thresholds.
        allowed: the options that may change (None: every one but
            :data:`FIXED_ON_FORK`).
        refusal: how a refused option's message goes on, e.g. ``"rlab set
            changes only: lr, ..."``.
        as_flags: name a refused option by its flag (``--group-size``), as a
            fork or resume takes it; else by its key (``group_size``, ``rlab set``).

    Raises:
        SettingsError: an option that may not change here (given with
            another value than it has), or a value RunConfig refuses (named
            by its flag, as ``rlab run`` names it).
    """
    unknown = [name for name in given if name not in RunConfig.model_fields]
    if unknown:
        raise SettingsError(f"{unknown[0]!r} is not a run option; {refusal}")
    merged = {**base.model_dump(), **given}
    if "alerts" in given:
        merged["alerts"] = {**base.alerts, **given["alerts"]}
    try:
        config = RunConfig.model_validate(merged)
    except ValidationError as err:
        raise SettingsError(validation_message(err, dict(given))) from None
    changes = {name: getattr(config, name) for name in given if getattr(config, name) != getattr(base, name)}
    for name in changes:  # a value given as it already is changes nothing, and is no refusal
        shown = flag(name) if as_flags else name
        if allowed is None and name in FIXED_ON_FORK:
            raise SettingsError(f"{shown} cannot change on a fork: {FIXED_ON_FORK[name]}")
        if allowed is not None and name not in allowed:
            raise SettingsError(f"{shown} cannot change here; {refusal}")
    return config, changes


def settings_metrics(config: RunConfig, version: int) -> dict[str, float]:
    """The live values of the numeric :data:`BETWEEN_STEPS` settings as step
    metrics (``settings/lr``, ...), and ``settings/version``: the number of the
    last change applied (0: as started; :class:`SettingsChange`)."""
    values = {name: getattr(config, name) for name in BETWEEN_STEPS if name != "alerts"}
    return {**{f"settings/{name}": float(v) for name, v in values.items()}, "settings/version": float(version)}


class SettingsChange(NamedTuple):
    """One setting change of a run, from its ``settings`` event: ``from_step``
    (the first step it is in force), ``changes`` (option -> value) and its
    ``version`` number (1, 2, ... in the order changes were made; a change
    made again on a resumed run's re-run steps keeps its number)."""

    from_step: int
    changes: dict[str, Any]
    version: int


def settings_plan(events: Iterable[Mapping[str, Any]]) -> list[SettingsChange]:
    """A run's setting changes in the order they were made, from its
    ``settings`` events (replayed ones left out: they repeat a change)."""
    return [SettingsChange(int(e["payload"]["from_step"]), dict(e["payload"]["changes"]),
                           int(e["payload"]["version"])) for e in events
            if e.get("kind") == "settings" and not (e.get("payload") or {}).get("replayed")]


def config_at(base: RunConfig, plan: list[SettingsChange], step: int) -> tuple[RunConfig, int]:
    """The options in force at ``step``: ``base`` (as the run started) with every
    change of ``plan`` made for a step up to ``step``, and the version number of
    the last of them (0: none, as the run started)."""
    config, version = base, 0
    for change in plan:
        if change.from_step <= step:
            config, version = config.model_copy(update=_typed(change.changes)), change.version
    return config, version


def _typed(changes: Mapping[str, Any]) -> dict[str, Any]:
    """Stored (JSON) changes as RunConfig values: each re-checked by RunConfig."""
    checked = RunConfig.model_validate(dict(changes))
    return {name: getattr(checked, name) for name in changes}


def stored_options(run: Mapping[str, Any]) -> RunConfig:
    """The options a stored run started with (its stored config's RunConfig fields)."""
    return RunConfig.model_validate({k: v for k, v in run["config"].items() if k in RunConfig.model_fields})


def check_reference(beta: float, has_reference: bool) -> None:
    """A KL weight above 0 needs a reference model: a LoRA run's base model, or the
    copy a run keeps when it starts with beta > 0.

    Raises:
        SettingsError: ``beta`` > 0 and the run has no reference.
    """
    if beta > 0 and not has_reference:
        raise SettingsError(f"beta={beta:g}: this run keeps no reference model (it trains every weight and started "
                            "with --beta 0); fork it with --beta to start one that does")


@dataclass(frozen=True)
class TrainerSettings:
    """What ``rlab set`` may change between a trainer's steps.

    between_steps: setting -> why it is safe to change then. refused:
    setting -> why not (said when one is asked for). check(run, events,
    given): the changes ``given`` (``KEY -> VALUE`` as typed) makes to the
    stored live run ``run`` whose ``events`` hold the changes so far, each
    checked by RunConfig, only those that differ; raises :class:`SettingsError`.
    """

    between_steps: Mapping[str, str]
    refused: Mapping[str, str]
    check: Callable[[Mapping[str, Any], Iterable[Mapping[str, Any]], Mapping[str, Any]], dict[str, Any]]


def _engine_changes(run: Mapping[str, Any], events: Iterable[Mapping[str, Any]],
                    given: Mapping[str, Any]) -> dict[str, Any]:
    """The engine's check (:data:`BETWEEN_STEPS`) at the run's next step, the reference model included."""
    started = stored_options(run)
    base, _ = config_at(started, settings_plan(events), (run["last_step"] or 0) + 1)
    config, changes = changed(base, given, BETWEEN_STEPS, as_flags=False,
                              refusal=f"rlab set changes only: {', '.join(BETWEEN_STEPS)} (README, \"Test a "
                              "change against its control\", says why each)")
    check_reference(config.beta, has_reference=started.beta > 0 or started.lora_rank > 0)
    return changes


#: The engine's own rules (``rlab run``).
ENGINE_SETTINGS = TrainerSettings(BETWEEN_STEPS, {}, _engine_changes)

#: The entry-point group a trainer integration registers its :class:`TrainerSettings` in.
TRAINERS_GROUP = "rlab.trainers"


def trainer_settings(scenario: str) -> TrainerSettings:
    """The rules of a run whose scenario is ``scenario``: a trainer integration's, registered
    under :data:`TRAINERS_GROUP` with that name (``trl``), else the engine's."""
    found = entry_points(group=TRAINERS_GROUP, name=scenario)
    return next(iter(found)).load() if found else ENGINE_SETTINGS


def checked_for_run(run: Mapping[str, Any], events: Iterable[Mapping[str, Any]],
                    given: Mapping[str, Any]) -> dict[str, Any]:
    """``rlab set``'s check of ``given`` against a stored live run: what its trainer lets
    change (:func:`trainer_settings`), each value by RunConfig's validators; the changes as
    JSON-ready values (only those that differ).

    Raises:
        SettingsError: an option it may not change (with the reason; given at the value it
            has too), a bad value, or nothing that changes.
    """
    rules = trainer_settings(run["scenario"])
    _refuse_fixed(rules, run["name"], given)
    changes = rules.check(run, events, given)
    if not changes:
        raise SettingsError(f"{', '.join(f'{k}={v}' for k, v in given.items())}: the run already has these values")
    return RunConfig.model_validate(changes).model_dump(mode="json", include=set(changes))


def _refuse_fixed(rules: TrainerSettings, run: str, given: Mapping[str, Any]) -> None:
    """Refuse a run option ``rules`` cannot change between steps even when it is given at the
    value the run has: "the run already has these values" would say it could change.
    (A name that is no run option, and one the trainer refuses with its own reason, are
    left to ``rules.check``.)

    Raises:
        SettingsError: such an option, naming those that can change (and a fork, where one may).
    """
    for name in given:
        if name in rules.between_steps or name in rules.refused or name not in RunConfig.model_fields:
            continue
        fork = ("" if name in FIXED_ON_FORK
                else f"; a fork changes it: rlab fork {run}@latest --name NEW {flag(name)} VALUE")
        raise SettingsError(f"{name} cannot change between steps; rlab set changes only: "
                            f"{', '.join(rules.between_steps)}{fork}")
