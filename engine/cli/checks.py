"""The checks of a run's options before it starts (and before the TUI opens).

What can be known without loading a model is checked here, each failure one
:class:`CliError` with the fix: the scenario or task, the model directory's
config, the device, the vLLM server, the reward file and its success
function, the batch against the task's data, the run file, the name, and a
fork's or resume's run and checkpoint. Cheap: torch is imported only for
``--device``.
"""

from __future__ import annotations

import json
import os
import typing
from pathlib import Path

from rlab.engine.cli.errors import CliError
from rlab.store.errors import UsageError

if typing.TYPE_CHECKING:
    from rlab.engine.run.config import RunConfig
    from rlab.engine.types import Scenario


def check_options(config: RunConfig) -> None:
    """Check what can be checked before a run starts (and before the TUI opens):
    the scenario, the model directory, the run file, the batch size against
    the scenario's data, and a ``--resume`` target. Cheap: no torch import.

    Raises:
        CliError: with the problem and its fix.
    """
    from rlab.engine.run.config import MODEL_ALIASES

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
    given (each may change there: ``engine.run.settings``), and the options the
    reopened run will have, checked as a new run's."""
    from rlab.engine.run.fork import plan_fork, plan_resume
    from rlab.engine.run.settings import SettingsError

    check_run_file(config.db, writable=True)
    _check_name_and_resume(config)
    try:
        reopened = (plan_fork(config) if config.fork_from is not None else plan_resume(config)).config
    except SettingsError as err:
        raise CliError(f"{'fork' if config.fork_from else '--resume'}: {err}") from None
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
    from rlab.engine.integrations.reporting import missing_package

    if (missing := missing_package(config.report_to)) is not None:
        raise CliError(missing)
    if config.resume is None and (config.fork_from is None or config.rewards is not None):
        _check_reward_file(config, scenario)
    from rlab.engine.run.settings import SettingsError, check_prompts

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
    from rlab.engine.rewards.success import SuccessError, SuccessRule

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
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
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
    from rlab.engine.policy.vllm_launch import find_vllm_python
    from rlab.engine.policy.vllm_pool import split_urls

    try:
        if config.vllm_url is not None:
            split_urls(config.vllm_url)
        else:
            find_vllm_python(config.vllm_python)
    except UsageError as err:  # a --vllm-url that names no server, or no vllm to start one (VLLMError)
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
    from rlab.store.errors import RunNotFoundError
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
        except RunNotFoundError as err:
            raise CliError(f"--resume: {err.args[0]}") from None
    if run_owner_alive(run):
        raise CliError(f"--resume {config.resume}: run {run['name']!r} in {config.db} is still running "
                       f"(process {run['pid']}); stop it first (q in its TUI, or kill {run['pid']})")


