"""The run options, generated from :class:`RunConfig`, and the headless engine entry.

Every field of ``RunConfig`` is one ``--flag`` (``max_steps`` ->
``--max-steps``), and every field of the nested :class:`JudgeSettings` one
``--judge-*`` flag, so the command line can never drift from the config:
the field's description is the help, its default is shown (and applied by
pydantic, not repeated here), ``Literal`` fields give choices, booleans are
``--x/--no-x`` and list or tuple fields take comma-separated values. Values
are handed to pydantic as the strings typed, so one validator (the
config's) checks them, and its errors are reported by flag
(:func:`validation_message`).

``python -P -m rlab.engine [run options]`` (what the TUI spawns) and
``rlab run --headless`` both end in :func:`run_headless`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import sys
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from rlab.engine.flags import assignments, flag, validation_message
from pydantic.fields import FieldInfo

if typing.TYPE_CHECKING:
    from rlab.engine.config import RunConfig
    from rlab.engine.types import Scenario

# RunConfig is imported inside the functions that need it: it pulls in the
# judge's openai client, which `rlab runs` (this module's error helpers) must
# not pay for at start-up.


def nested_models() -> dict[str, type[BaseModel]]:
    """RunConfig fields holding a settings model: each of its fields is a
    ``--<field>-<name>`` flag; the model is built when any of them is given."""
    from rlab.engine.config import RunConfig

    return {name: _optional(info.annotation) for name, info in RunConfig.model_fields.items()
            if isinstance(_optional(info.annotation), type)
            and issubclass(_optional(info.annotation), BaseModel)}

EXTRA_FLAGS = {"judge.timeout_s": ("--judge-timeout",), "judge.use_cache": ("--judge-no-cache",),
               "alerts": ("--alerts",)}
"""Older flag names kept working beside the generated ones (dest -> flags);
a boolean's extra flag with ``-no-`` in it sets False."""

ERROR_PREFIX = "rlab: error: "


class CliError(Exception):
    """A user error with its fix, printed as one ``rlab: error:`` line."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse with usage errors as one ``rlab: error:`` line (exit 2)."""

    def error(self, message: str) -> typing.NoReturn:
        """Print ``rlab: error: MESSAGE (see PROG --help)`` and exit with status 2."""
        self.exit(2, f"{ERROR_PREFIX}{message} (see `{self.prog} --help`)\n")


def _optional(annotation: Any) -> Any:
    """``X`` for ``X | None`` (the flag is simply left out for None)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",")]


class _NameValue(argparse.Action):
    """``--flag NAME=VALUE``, repeatable, collected into one dict (a dict field)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        try:
            given = assignments([str(values)], example=f"{option_string} length_drift=0.3")
        except ValueError as err:
            raise argparse.ArgumentError(self, str(err)) from None
        setattr(namespace, self.dest, dict(getattr(namespace, self.dest, None) or {}) | given)


def _help(info: FieldInfo, default_shown: bool = True) -> str:
    """The field's description (argparse's ``%`` escaped) and, if shown, its default."""
    text = (info.description or "").replace("%", "%%")
    if default_shown and info.default not in (None, [], ()) and not info.is_required():
        value = ",".join(map(str, info.default)) if isinstance(info.default, (list, tuple)) \
            else info.default
        text += f" (default: {value})"
    return text.strip()


def _add_field(group: argparse._ActionsContainer, dest: str, info: FieldInfo) -> None:
    kind = _optional(info.annotation)
    names = [flag(dest), *EXTRA_FLAGS.get(dest, ())]
    common: dict[str, Any] = {"dest": dest, "default": argparse.SUPPRESS}
    if kind is bool:
        group.add_argument(flag(dest), action=argparse.BooleanOptionalAction, help=_help(info), **common)
        for extra in names[1:]:
            negative = "-no-" in extra
            same = flag(dest).replace("--", "--no-", 1) if negative else flag(dest)
            group.add_argument(extra, action="store_false" if negative else "store_true",
                               help=f"same as {same}", **common)
        return
    origin = typing.get_origin(kind)
    if origin is Literal:
        group.add_argument(*names, choices=typing.get_args(kind), help=_help(info), **common)
    elif origin in (list, tuple):
        group.add_argument(*names, type=_comma_list, metavar="A,B", help=_help(info), **common)
    elif origin is dict:
        group.add_argument(*names, action=_NameValue, metavar="NAME=VALUE",
                           help=_help(info, default_shown=False) + " (repeatable)", **common)
    else:
        metavar = {int: "INT", float: "NUM", Path: "PATH"}.get(kind, dest.rsplit(".", 1)[-1].upper())
        group.add_argument(*names, metavar=metavar, help=_help(info), **common)


def add_run_options(parser: argparse.ArgumentParser, *, leave_out: tuple[str, ...] = ()) -> None:
    """Add one option per RunConfig field (and per nested settings field), but
    those in ``leave_out`` (``rlab fork`` takes ``fork_from`` as its argument).

    Options default to ``argparse.SUPPRESS``: the namespace holds only what
    was typed, and :func:`config_from_args` lets RunConfig fill the rest.
    """
    from rlab.engine.config import RunConfig

    nested = nested_models()
    for name, info in RunConfig.model_fields.items():
        if name not in nested and name not in leave_out:
            _add_field(parser, name, info)
    for name, model in nested.items():
        group = parser.add_argument_group(f"{name}: {(RunConfig.model_fields[name].description or '')}")
        for sub, info in model.model_fields.items():
            _add_field(group, f"{name}.{sub}", info)


def add_fork_arguments(parser: argparse.ArgumentParser) -> None:
    """``rlab fork``'s arguments: RUN@STEP, ``--headless`` and every run option a fork takes."""
    parser.add_argument("fork_from", metavar="RUN@STEP",
                        help="the run and its checkpoint: a checkpoint's step, best (held-out pass@1) or latest")
    parser.add_argument("--headless", action="store_true", help="no TUI; print progress and a JSON summary")
    add_run_options(parser, leave_out=("fork_from", "resume"))


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The RunConfig of the typed run options (others take RunConfig's defaults).

    Raises:
        CliError: a value breaks a rule; the message names the flag and the rule.
    """
    from rlab.engine.config import RunConfig

    nested = nested_models()
    given: dict[str, Any] = {}
    for dest, value in vars(args).items():
        head, _, sub = dest.partition(".")
        if sub and head in nested:
            given.setdefault(head, {})[sub] = value
        elif head in RunConfig.model_fields:
            given[head] = value
    from rlab.engine.run_config import merge_run_config

    given = merge_run_config(given)
    try:
        return RunConfig.model_validate(given)
    except ValidationError as err:
        raise CliError(validation_message(err, given)) from None


def engine_command(argv: list[str]) -> list[str]:
    """The engine's command line for run options ``argv`` (``--headless`` dropped): the one
    builder of it, for the TUI's run and its fork dialog. ``python -P -m rlab.engine``: -P
    keeps the working directory off ``sys.path``, so a user's files cannot shadow our modules."""
    return [sys.executable, "-P", "-m", "rlab.engine", *(a for a in argv if a != "--headless")]


def check_options(config: RunConfig) -> None:
    """Check what can be checked before a run starts (and before the TUI opens):
    the scenario, the model directory, the run file, the batch size against
    the scenario's data, and a ``--resume`` target. Cheap: no torch import.

    Raises:
        CliError: with the problem and its fix.
    """
    from rlab.engine.config import MODEL_ALIASES

    if config.fork_from is not None or config.resume is not None:
        _check_reopen(config)
        return
    scenario = _scenario(config)
    config = config.with_run_defaults(scenario.run_defaults)  # every check sees the options the run will have
    if config.model is not None and str(config.model) not in MODEL_ALIASES:
        _check_model(config, config.model)
    _check_run_options(config, scenario)
    if config.store:
        check_run_file(config.db, writable=True)
        _check_name_and_resume(config)


def _scenario(config: RunConfig) -> Scenario:
    from rlab.scenarios import UnknownScenarioError, load_scenario
    from rlab.scenarios.task_scenario import TaskError

    try:
        return load_scenario(config.scenario, config.task)
    except UnknownScenarioError as err:
        raise CliError(f"--scenario: {err}") from None
    except TaskError as err:
        raise CliError(f"--task: {err}") from None


def _check_reopen(config: RunConfig) -> None:
    """A fork or a resume: the run file, the run and its checkpoint, the options
    given (each may change there: ``engine.settings``), and the options the
    reopened run will have, checked as a new run's."""
    from rlab.engine.fork import plan_fork, plan_resume
    from rlab.engine.settings import SettingsError

    check_run_file(config.db, writable=True)
    _check_name_and_resume(config)
    try:
        reopened = (plan_fork(config) if config.fork_from is not None else plan_resume(config)).config
    except SettingsError as err:
        raise CliError(f"{'fork' if config.fork_from else '--resume'}: {err}") from None
    except (KeyError, ValueError, FileNotFoundError) as err:
        raise CliError(str(err.args[0] if isinstance(err, KeyError) else err)) from None
    _check_run_options(reopened, _scenario(reopened))


def _check_run_options(config: RunConfig, scenario: Scenario) -> None:
    """The options of a run about to start (new, resumed or forked) against this machine and the task."""
    if config.device is not None:
        _check_device(config.device)
    cpus = len(os.sched_getaffinity(0))
    if config.threads is not None and config.threads > cpus:
        raise CliError(f"--threads {config.threads}: this process may use {cpus} CPUs; more threads than CPUs "
                       f"only contend with each other (and thousands exhaust memory): pass at most {cpus}")
    if config.backend == "vllm":
        _check_vllm(config)
    from rlab.engine.reporting import missing_package

    if (missing := missing_package(config.report_to)) is not None:
        raise CliError(missing)
    if config.resume is None and (config.fork_from is None or config.rewards is not None):
        _check_reward_file(config, scenario)
    from rlab.engine.settings import SettingsError, check_prompts

    what = f"task {scenario.name!r}" if config.task is not None else f"scenario {config.scenario!r}"
    try:
        check_prompts(config, len(scenario.train_examples(config.seed)), what)
    except SettingsError as err:
        raise CliError(str(err)) from None


def _check_reward_file(config: RunConfig, scenario: Scenario) -> None:
    """The reward file (``--rewards``, else the task's) loads (in the user-code child
    process: a second or so) and has the success function, before any model loads
    or the run file is touched."""
    from rlab.engine.rewards.edit.check import validate
    from rlab.engine.success import SuccessError, SuccessRule

    path = config.rewards or scenario.reward_file
    if not path.is_file():
        raise CliError(f"--rewards {path}: no such file")
    result = validate(path.read_text(encoding="utf-8"), [], [], filename=path.name)
    if not result.ok:
        where = f" (line {result.lineno})" if result.lineno and f"line {result.lineno}" not in result.message else ""
        raise CliError(f"reward file {path}{where}: {result.message}")
    try:
        SuccessRule.of(scenario, config).check(result.weights, str(path))
    except SuccessError as err:
        raise CliError(str(err)) from None


def _check_model(config: RunConfig, model_dir: Path) -> None:
    """The model directory exists, and the completion length and LoRA rank
    fit the model (read from its config.json: no weights loaded)."""
    path = model_dir / "config.json"
    try:
        model = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise CliError(f"--model: model directory {config.model} not found or without a readable "
                       f"config.json ({type(err).__name__}); pass a directory saved by save_pretrained "
                       "(or leave --model out for the tiny policy)") from None
    context = model.get("max_position_embeddings") or model.get("n_positions")
    if isinstance(context, int) and config.max_new_tokens >= context:
        raise CliError(f"--max-new-tokens {config.max_new_tokens}: the model's context is {context} "
                       f"tokens, prompt included; pass less than {context}")
    width = model.get("hidden_size") or model.get("n_embd")
    if isinstance(width, int) and config.lora_rank > width:
        raise CliError(f"--lora-rank {config.lora_rank}: above the model's width ({width}); "
                       "a LoRA rank is usually 8-64")


def _check_device(device: str) -> None:
    """A device torch knows and this machine has (imports torch: only when
    --device is given)."""
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError):
        raise CliError(f"--device {device!r}: not a torch device; pass cpu, cuda or cuda:N "
                       "(or leave it out)") from None
    if parsed.type == "cuda" and (not torch.cuda.is_available()
                                  or (parsed.index or 0) >= torch.cuda.device_count()):
        raise CliError(f"--device {device}: no such CUDA device here "
                       f"({torch.cuda.device_count()} visible); pass cpu or leave it out")
    if parsed.type not in ("cpu", "cuda"):
        raise CliError(f"--device {device}: only cpu and cuda are supported")


def _check_vllm(config: RunConfig) -> None:
    """The ``--vllm-url`` list parses, or, without one, a Python with vllm is there to start a server."""
    from rlab.engine.policy.vllm import VLLMError
    from rlab.engine.policy.vllm_launch import find_vllm_python
    from rlab.engine.policy.vllm_pool import split_urls

    try:
        if config.vllm_url is not None:
            split_urls(config.vllm_url)
        else:
            find_vllm_python(config.vllm_python)
    except (ValueError, VLLMError) as err:
        raise CliError(f"--backend vllm: {err}") from None


def check_run_file(db: Path, *, writable: bool) -> None:
    """Fail early, with the fix, when the run file cannot be used.

    Raises:
        CliError: the folder is missing, the file cannot be created, or an
            existing file is not a run file (garbage, truncated, newer schema).
    """
    from rlab.store.db import RunFileError, check_run_file as store_check

    parent = db.resolve().parent
    if writable and not parent.is_dir():
        raise CliError(f"cannot write the run file {db}: folder {parent} does not exist; "
                       "create it or pass --db")
    try:
        store_check(db, writable=writable)
    except RunFileError as err:
        raise CliError(str(err)) from None


def _check_name_and_resume(config: RunConfig) -> None:
    from rlab.store.db import run_owner_alive
    from rlab.store.reader import resolve_run
    from rlab.store.reader import StoreReader

    if config.resume is None and config.name is None:
        return
    if not config.db.is_file():
        if config.resume is not None:
            raise CliError(f"--resume {config.resume}: there is no run file at {config.db}; "
                           "pass the --db of the run to continue")
        return
    with StoreReader(config.db) as reader:
        if config.resume is None:
            if config.name is not None and reader.run_by_name(config.name) is not None:
                raise CliError(f"--name {config.name}: a run with that name is already in {config.db}; "
                               "choose another --name" + ("" if config.fork_from else ", or continue it with --resume"))
            return
        try:
            run = resolve_run(reader, config.resume)
        except KeyError as err:
            raise CliError(f"--resume: {err.args[0]}") from None
    if run_owner_alive(run):
        raise CliError(f"--resume {config.resume}: run {run['name']!r} in {config.db} is still running "
                       f"(process {run['pid']}); stop it first (q in its TUI, or kill {run['pid']})")


def run_headless(config: RunConfig) -> int:
    """Train without the TUI; print progress to stderr and one JSON summary
    line to stdout. Returns the exit status: 0, or 1 for a run that ended ``failed``
    (every reward score of every step failed: nothing was trained).

    stdout and stderr are scrubbed of credentials first (see
    :mod:`store.secrets`), so the engine log the TUI keeps holds no key.
    """
    from rlab.engine.step import Terminated, run, summary_line
    from rlab.store.secrets import scrub_streams

    def terminate(signum: int, frame: object) -> None:
        raise Terminated(f"SIGTERM (signal {signum})")

    scrub_streams()
    quiet_libraries()
    signal.signal(signal.SIGTERM, terminate)  # a kill or a scheduler's stop: record the stop, do not vanish
    summary = run(config)
    print(summary_line(summary))
    return 1 if summary["status"] == "failed" else 0


def quiet_libraries() -> None:
    """Keep the run's log for the run: no progress bars of model loading and saving or dataset
    parsing, no libraries' FutureWarnings about their own next versions (nothing a user of rlab
    can act on); the lab's own progress and alerts stay."""
    import warnings

    from transformers.utils import logging as transformers_logging

    warnings.filterwarnings("ignore", category=FutureWarning)
    transformers_logging.disable_progress_bar()


def expected_errors() -> tuple[type[BaseException], ...]:
    """The exceptions a run reports as one ``rlab: error:`` line (not a
    traceback): bad options, files and models, and what the engine raises
    for them at start. Imports the engine (torch): call it for ``run`` only."""
    from rlab.engine.train.checkpoint import CheckpointError
    from rlab.engine.policy.model import ModelLoadError
    from rlab.engine.policy.vllm import VLLMError
    from rlab.engine.rewards.rubric_errors import RubricError
    from rlab.store.db import RunFileError, SchemaVersionError
    from rlab.store.writer import RunBusyError

    return (CliError, ModelLoadError, RubricError, CheckpointError, VLLMError, RunFileError, RunBusyError,
            SchemaVersionError, sqlite3.DatabaseError, OSError, KeyError, ValueError)


def error_line(err: BaseException) -> str:
    """One ``rlab: error:`` line for an expected error (KeyError's quotes dropped),
    scrubbed of credentials: a reward function's error may quote a key."""
    from rlab.store.secrets import scrub_text

    message = err.args[0] if isinstance(err, KeyError) and err.args else err
    if isinstance(err, ValidationError):
        message = validation_message(err)
    return scrub_text(f"{ERROR_PREFIX}{message}")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -P -m rlab.engine [run options]``: ``rlab run --headless``.

    Returns the exit status: 0 after a run, 2 with one ``rlab: error:`` line
    for bad options or files, 130 when interrupted.
    """
    parser = ArgumentParser(prog="python -m rlab.engine",
                            description="The Rollout Lab engine: train headless (rlab run --headless).")
    add_run_options(parser)
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
        check_options(config)
    except CliError as err:
        print(error_line(err), file=sys.stderr)
        return 2
    return guarded(lambda: run_headless(config))


def guarded(command: typing.Callable[[], int]) -> int:
    """Run a ``run`` command, turning expected errors into one line (exit 2)
    and an error that ended a started run into the one line that says where
    its traceback is kept (exit 1; ``engine.step.RunCrashed``)."""
    from rlab.engine.step import RunCrashed

    try:
        return command()
    except RunCrashed as err:
        print(f"{ERROR_PREFIX}{err}", file=sys.stderr)
        return 1
    except expected_errors() as err:
        print(error_line(err), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rlab: interrupted", file=sys.stderr)
        return 130
    except BaseException as err:
        from rlab.engine.step import Terminated

        if not isinstance(err, Terminated):
            raise
        notes = getattr(err, "__notes__", None) or ["rlab run --headless --resume NAME"]
        print(f"rlab: {err}: the run is stopped; `{notes[-1]}` continues it", file=sys.stderr)
        return 143
