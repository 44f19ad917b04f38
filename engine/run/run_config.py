"""Run configs: ``rlab run --config run.toml``.

A run config (a TOML file; "run file" is the SQLite file a run is stored in) holds ``rlab run`` options as TOML keys, named as the fields of
:class:`engine.run.config.RunConfig` (``max_steps = 200``, ``lora_rank = 16``,
a ``[judge]`` table for the judge settings), and optionally a ``[task]``
table with the keys of task.toml (``scenarios.task_file.TaskSpec``) or
``task = "PATH"``. Relative paths in the file are relative to the file.
Options typed on the command line override the file; the resolved
RunConfig is stored with the run (config and manifest), so ``--resume`` and
compare see exactly what ran.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from rlab.store.errors import UsageError

#: Task-table keys holding paths (relative to the run config).
TASK_PATH_KEYS = ("train", "eval", "rewards")


class RunConfigError(UsageError):
    """A run config that cannot be used; the message names the file and the key."""


def read_run_config(path: Path) -> dict[str, Any]:
    """The options of the run config ``path`` (relative paths made absolute).

    Raises:
        RunConfigError: the file is missing, is not TOML, or has a key that is
            no ``rlab run`` option (the message lists the known ones).
    """
    from rlab.engine.run.config import RunConfig

    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise RunConfigError(f"--config {path}: cannot read it ({err.strerror or err})") from None
    except tomllib.TOMLDecodeError as err:
        raise RunConfigError(f"--config {path}: not valid TOML: {err}") from None
    unknown = sorted(set(raw) - set(RunConfig.model_fields) | ({"config"} & set(raw)))
    if unknown:
        known = ", ".join(k for k in RunConfig.model_fields if k != "config")
        raise RunConfigError(f"--config {path}: unknown key(s) {', '.join(map(repr, unknown))}; "
                           f"the keys are rlab run options: {known}")
    base = path.resolve().parent
    for key in ("db", "model", "rewards"):
        if isinstance(raw.get(key), str) and not _is_alias(raw[key]):
            raw[key] = str(base / raw[key])
    task = raw.get("task")
    if isinstance(task, dict):
        raw["task"] = _absolute_task_table(task, base)
    elif isinstance(task, str) and ":" not in task:
        raw["task"] = str(base / task)
    return raw


def _is_alias(value: str) -> bool:
    from rlab.engine.run.config import MODEL_ALIASES

    return value in MODEL_ALIASES


def _absolute_task_table(table: dict[str, Any], base: Path) -> dict[str, Any]:
    fixed = dict(table)
    for key in TASK_PATH_KEYS:
        if isinstance(fixed.get(key), str):
            fixed[key] = str(base / fixed[key])
    env = fixed.get("env")
    if isinstance(env, str) and ":" in env:
        file_part, _, cls = env.rpartition(":")
        fixed["env"] = f"{base / file_part}:{cls}"
    return fixed


def merge_run_config(given: dict[str, Any]) -> dict[str, Any]:
    """Command-line options ``given`` (only those typed) over the run config they name.

    ``given["config"]`` is the run config (absent: ``given`` is returned as it
    is). Nested tables (``judge``) merge key by key, the command line winning.
    """
    if given.get("config") is None:
        return given
    merged = read_run_config(Path(given["config"]))
    for key, value in given.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged
