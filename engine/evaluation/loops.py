"""``rlab eval`` (loop A) and ``rlab select`` (loop B) from settings to artifacts.

Both measure a fixed policy on a split, record a run of kind ``eval`` or
``select`` in the run file (so the TUI lists it next to training runs) and,
with ``out``, write results.jsonl, summary.json and manifest.json through
``rlab export``'s writer.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rlab.engine.run.config import RunConfig
from rlab.engine.evaluation.frozen import read_completions
from rlab.engine.evaluation.measure import Attempt, Sampling, sample_and_score, score_frozen
from rlab.engine.evaluation.record import finish_loop_run, start_loop_run
from rlab.engine.evaluation.source import load_policy
from rlab.engine.run.fork import CheckpointRef, find_checkpoint
from rlab.engine.evaluation.summary import check_ks, default_ks, summarize
from rlab.engine.run.manifest import build_loop_manifest, file_sha256
from rlab.engine.paths import default_run_name
from rlab.engine.rewards.rubric import Rubric, load_rubric
from rlab.engine.rewards.success import SuccessRule
from rlab.scenarios import load_scenario
from rlab.store.errors import UsageError
from rlab.store.export import export_run
from rlab.store.records import check_run_name


class LoopSettings(BaseModel):
    """What ``rlab eval`` / ``rlab select`` measure. Units: tokens.

    kind: ``eval`` (one completion per example, greedy by default) or
    ``select`` (``samples`` per example, ``ks`` for pass@k).
    scenario / task: a built-in scenario, or a user task (task.toml,
    ``reasoning-gym:NAME``, ``verifiers:MODULE``) measured instead.
    limit: measure the first ``limit`` examples of the split (None: all).
    completions: a frozen results.jsonl to score instead of a model (eval only).
    checkpoint: ``RUN`` or ``RUN@STEP`` of a run in ``db``.
    success / success_threshold: what counts as solved, over the task's own
    declaration (``engine.rewards.success``).
    """

    model_config = ConfigDict(extra="forbid")

    kind: Literal["eval", "select"]
    scenario: str = RunConfig.model_fields["scenario"].default
    task: str | None = None
    split: Literal["eval", "train"] = "eval"
    limit: int | None = Field(None, ge=1)
    model: Path | None = None
    checkpoint: str | None = None
    completions: Path | None = None
    samples: int = Field(1, ge=1)
    ks: list[int] | None = None
    temperature: float = Field(0.0, ge=0)
    max_new_tokens: int = Field(RunConfig.model_fields["max_new_tokens"].default, ge=1)
    seed: int = 0
    reward_file: Path | None = None
    success: str | None = Field(None, min_length=1)
    success_threshold: float | None = Field(None, allow_inf_nan=False)
    device: str | None = None
    db: Path = Path("rlab.db")
    name: str | None = None
    out: Path | None = None

    @field_validator("name")
    @classmethod
    def _folder_name(cls, name: str | None) -> str | None:
        """The rule every path that names a run applies (``store.records.check_run_name``)."""
        return None if name is None else check_run_name(name)

    @model_validator(mode="after")
    def _consistent(self) -> "LoopSettings":
        sources = [flag for flag, value in (("--model", self.model), ("--checkpoint", self.checkpoint),
                                            ("--completions", self.completions)) if value is not None]
        if len(sources) > 1:
            raise UsageError(f"{' and '.join(sources)} both name the completions' source; pass one")
        if self.kind == "select" and self.completions is not None:
            raise UsageError("rlab select samples N completions from a model; frozen --completions "
                             "are scored with rlab eval")
        if self.kind == "select" and self.temperature == 0 and self.samples > 1:
            raise UsageError("rlab select with --temperature 0 draws N identical greedy samples; "
                             "give a temperature > 0 (default 1.0)")
        return self


@dataclass
class LoopResult:
    """A finished eval/select run: its id and name in the run file, its
    summary (see ``summary.summarize``) and the artifacts written (``out``)."""

    run_id: int
    name: str
    summary: dict[str, Any]
    artifacts: dict[str, Path]


def split_examples(scenario, split: str, seed: int, limit: int | None) -> list[dict]:
    """The examples measured: the scenario's ``split`` (the train split
    shuffled with ``seed``, as training draws it), the first ``limit``."""
    examples = scenario.eval_examples() if split == "eval" else scenario.train_examples(seed)
    return examples if limit is None else examples[:limit]


def run_loop(settings: LoopSettings) -> LoopResult:
    """Measure, record the run, write the artifacts.

    Raises:
        scenarios.UnknownScenarioError, engine.policy.model.ModelLoadError,
        engine.train.checkpoint.CheckpointError, engine.rewards.rubric_errors.RubricError,
        engine.evaluation.frozen.CompletionsFileError, KeyError (unknown
        run), ValueError (bad settings), FileNotFoundError.
    """
    checkpoint = None if settings.checkpoint is None else find_checkpoint(settings.db, settings.checkpoint)
    if checkpoint is not None:
        settings = checkpoint_task(settings, checkpoint)
    scenario = load_scenario(settings.scenario, settings.task)
    if "max_new_tokens" not in settings.model_fields_set and "max_new_tokens" in scenario.run_defaults:
        settings = settings.model_copy(update={"max_new_tokens": scenario.run_defaults["max_new_tokens"]})
    ks = check_ks(settings.ks or default_ks(settings.samples), settings.samples) \
        if settings.kind == "select" else None
    examples = split_examples(scenario, settings.split, settings.seed, settings.limit)
    reward_file = (settings.reward_file or scenario.reward_file).resolve()
    rubric = load_rubric(reward_file)
    success = SuccessRule.of(scenario, settings)
    success.check(rubric.weights, str(reward_file))
    sampling = Sampling(settings.temperature, settings.max_new_tokens, settings.samples, settings.seed)
    if settings.completions is not None:
        examples, attempts, template, model = _frozen(settings.completions, scenario, examples, rubric)
    else:
        policy, model = load_policy(scenario=scenario, model=settings.model, checkpoint=checkpoint,
                                    seed=settings.seed, device=settings.device)
        template = policy.tokenizer.chat_template
        attempts = None
    config = settings.model_dump(mode="json") | {"success": success.function,
                                                  "success_threshold": success.threshold}
    manifest = build_loop_manifest(
        kind=settings.kind, scenario=scenario, split=settings.split, examples=examples,
        chat_template=template, reward_source=rubric.source, reward_file=reward_file, success=success.label,
        sampling=_sampling_fields(settings, sampling), seed=settings.seed, model=model, config=config)
    name = settings.name or default_run_name(f"{settings.kind}-{scenario.name}")
    writer, run_id = start_loop_run(settings.db, name=name, kind=settings.kind, scenario=scenario.name,
                                    config=config, manifest=manifest, rubric=rubric, reward_file=reward_file)
    try:
        if attempts is None:
            attempts = sample_and_score(policy, scenario, examples, rubric, sampling)
        summary = summarize(examples, attempts, success, ks)
        finish_loop_run(writer, run_id, examples, attempts, summary, success)
    except BaseException as err:
        writer.write_event(run_id, "error", {"error": f"{type(err).__name__}: {err}"})
        writer.set_status(run_id, "stopped" if isinstance(err, KeyboardInterrupt) else "failed")
        raise
    finally:
        writer.close()
    artifacts = export_run(settings.db, run_id, settings.out) if settings.out is not None else {}
    return LoopResult(run_id, name, summary, artifacts)


def checkpoint_task(settings: LoopSettings, checkpoint: CheckpointRef) -> LoopSettings:
    """``settings`` measuring what the checkpoint's run trained on: its scenario or task, its
    success rule and its completion length (a success function, threshold or length given
    is kept: it is recorded in the eval run's manifest).

    Raises:
        ValueError: a ``--scenario`` or ``--task`` given that is not the run's (a checkpoint of
            one task scored on another measures nothing); the message names both.
    """
    config = checkpoint.config
    trained = {"scenario": config.get("scenario", settings.scenario), "task": config.get("task")}
    for key in ("task", "scenario"):
        given = getattr(settings, key)
        if key not in settings.model_fields_set or given is None:
            continue
        # a --scenario given names no task: the run's task (if it had one) differs from it
        same = _same_task(given, trained[key]) and (key == "task" or trained["task"] is None)
        if not same:
            raise UsageError(f"--{key} {given}: checkpoint {checkpoint.run_name}@{checkpoint.step} was trained on "
                             f"{_task_text(trained)}; its run decides what the eval measures: drop --{key}")
    kept = {k: config[k] for k in ("success", "success_threshold", "max_new_tokens")
            if k not in settings.model_fields_set and config.get(k) is not None}
    return settings.model_copy(update=trained | kept)


def _same_task(given: Any, trained: Any) -> bool:
    if given == trained:
        return True
    paths = [Path(str(v)) for v in (given, trained) if isinstance(v, str) and ":" not in v]
    return len(paths) == 2 and paths[0].resolve() == paths[1].resolve()


def _task_text(trained: dict[str, Any]) -> str:
    return f"task {trained['task']}" if trained["task"] else f"scenario {trained['scenario']}"


def _sampling_fields(settings: LoopSettings, sampling: Sampling) -> dict[str, Any]:
    if settings.completions is not None:
        return {"source": "frozen completions", "n": 1}
    return sampling.manifest_fields()


def _frozen(path: Path, scenario, dataset: list[dict],
            rubric: Rubric) -> tuple[list[dict], list[list[Attempt]], None, dict[str, Any]]:
    """The examples the file answers (in dataset order, so the dataset hash
    does not depend on the file's line order) and their scored attempts."""
    position = {example["id"]: i for i, example in enumerate(dataset)}
    lines = sorted(read_completions(path, dataset), key=lambda line: position[line.example_id])
    examples = [dataset[position[line.example_id]] for line in lines]
    attempts = score_frozen(scenario, examples, [line.completion for line in lines], rubric,
                            [line.extra for line in lines])
    return examples, attempts, None, {"frozen_completions": str(path.resolve()),
                                      "sha256": file_sha256(path)}
