"""TRL GRPOTrainer artifacts: ``output_dir/completions/completions_{step:05d}.parquet``.

With ``log_completions=True`` TRL's ``GRPOTrainer.log`` writes, at every
logging step, one Parquet file of the last generation batch with columns
``step``, ``prompt``, ``completion`` (text, or a list of chat messages for
conversational datasets), one float column per reward function (named as
``reward_func_names``: the function's ``__name__`` or the reward model's
name), any ``log_extra`` columns, then ``advantage``. Rows come in groups of
``num_generations`` consecutive rows with the same prompt (TRL's
RepeatSampler), which is how groups are rebuilt here.

Logged metrics (``reward``, ``rewards/{name}/mean``, ``kl``, ...) come from
the ``log_history`` of the newest ``trainer_state.json`` (in ``output_dir``
or its ``checkpoint-N`` folders), matched by ``step``. Reward-function
columns are the ones named by ``rewards/{name}/mean`` there; without a
trainer state, every numeric column between ``completion`` and
``advantage`` counts as one.

The total reward of a completion is the sum of its reward-function values,
NaN skipped (TRL's ``nansum`` with the default ``reward_weights`` of 1;
weights are not in the files), unless the file has a ``reward`` column (a
``log_extra`` column, as ``rlab export --format trl`` writes): that one is
the total then.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from rlab.store.formats.base import (
    step_of,
    FormatError,
    ImportedRun,
    ImportedStep,
    finite_or_zero,
    group_runs,
    last_assistant_text,
    number,
    prompt_text,
    read_json,
    read_table,
    tool_calls_of,
)
from rlab.store.records import GroupRecord, TrajectoryRecord

NAME = "trl"
FILE_PATTERN = re.compile(r"completions_(\d+)\.parquet$")
FIXED_COLUMNS = ("step", "prompt", "completion", "advantage", "reward")


def completion_files(path: Path) -> list[Path]:
    """The completions Parquet files under ``path`` (an output_dir, its
    ``completions`` folder, or one file), by step; eval-mode files (in a
    folder named ``eval``) are left out."""
    if path.is_file():
        return [path] if FILE_PATTERN.search(path.name) else []
    root = path / "completions" if (path / "completions").is_dir() else path
    files = [p for p in root.rglob("completions_*.parquet")
             if FILE_PATTERN.search(p.name) and "eval" not in p.relative_to(root).parts[:-1]]
    return sorted(files, key=lambda p: step_of(FILE_PATTERN, p))


def detect(path: Path) -> bool:
    """Whether ``path`` holds TRL completions Parquet files."""
    return bool(completion_files(path))


def _trainer_state(path: Path) -> dict | None:
    """The ``trainer_state.json`` with the longest ``log_history`` under
    ``path`` (itself or a ``checkpoint-N`` folder), or None."""
    root = path if path.is_dir() else path.parent.parent
    candidates = [root / "trainer_state.json", *root.glob("checkpoint-*/trainer_state.json")]
    states = [read_json(p) for p in candidates if p.is_file()]
    states = [s for s in states if isinstance(s, dict) and isinstance(s.get("log_history"), list)]
    return max(states, key=lambda s: len(s["log_history"]), default=None)


def logged_metrics(state: dict | None) -> dict[int, dict[str, float]]:
    """Training metrics of ``log_history`` by step (numbers only; eval
    entries, whose keys start with ``eval_``, the summary entry and entries
    without a whole-number step left out)."""
    out: dict[int, dict[str, float]] = {}
    for entry in (state or {}).get("log_history", []):
        step = entry.get("step") if isinstance(entry, dict) else None
        if not isinstance(step, int) or isinstance(step, bool) or "train_runtime" in entry:
            continue
        values = {k: float(v) for k, v in entry.items()
                  if k not in ("step", "epoch") and not k.startswith("eval_")
                  and isinstance(v, (int, float)) and not isinstance(v, bool)
                  and math.isfinite(v)}
        out.setdefault(step, {}).update(values)
    return out


def reward_names(columns: list[str], table_rows: list[dict], metrics: dict[int, dict]) -> list[str]:
    """The reward-function columns of a completions table (see module doc)."""
    # a reward model's name may itself hold "/" (org/model)
    logged = {key[len("rewards/"):-len("/mean")] for step in metrics.values() for key in step
              if key.startswith("rewards/") and key.endswith("/mean")}
    middle = [c for c in columns if c not in FIXED_COLUMNS]
    if logged:
        return [c for c in middle if c in logged]
    return [c for c in middle
            if all(r[c] is None or isinstance(r[c], (int, float)) for r in table_rows)]


def _text_and_messages(value: Any, role: str) -> tuple[str, list[dict]]:
    """A TRL prompt/completion (text or chat messages) as (text, messages)."""
    if isinstance(value, str):
        return value, [{"role": role, "content": value}]
    if isinstance(value, list) and all(isinstance(m, dict) for m in value):
        messages = [{k: v for k, v in m.items() if v is not None} for m in value]
        text = prompt_text(messages) if role == "user" else last_assistant_text(messages)
        return text, messages
    raise ValueError(f"expected text or a list of chat messages, got {type(value).__name__}")


def read_step(path: Path, metrics: dict[int, dict[str, float]]) -> ImportedStep:
    """One completions file as a step.

    Raises:
        FormatError: a required column is missing, or a row's value has the
            wrong type (the message names the row and column).
    """
    columns, rows = read_table(path)
    step = step_of(FILE_PATTERN, path)
    return rows_to_step(path, step, columns, rows, metrics)


def rows_to_step(path: Path, step: int, columns: list[str], rows: list[dict],
                 metrics: dict[int, dict[str, float]]) -> ImportedStep:
    """A completions table (rows as dicts with the columns of the module doc)
    as step ``step``; ``path`` names the source in errors. Shared by the file
    importer and the TRL callback (rlab.engine.integrations.trl), which reads
    the same table from the trainer before TRL writes it.

    Raises:
        FormatError: as :func:`read_step`.
    """
    missing = [c for c in ("prompt", "completion") if c not in columns]
    if missing:
        raise FormatError(path, f"column {missing[0]!r}", "missing (not a TRL completions file?)")
    names = reward_names(columns, rows, metrics)
    groups = []
    for index, rows_of_group in enumerate(group_runs(list(enumerate(rows)),
                                                     key=lambda r: repr(r[1]["prompt"]))):
        trajectories = [_trajectory(path, position, number_and_row, names)
                        for position, number_and_row in enumerate(rows_of_group)]
        prompt = prompt_text(trajectories[0].messages)
        groups.append(GroupRecord(index=index, example_id=index, prompt=prompt,
                                  trajectories=trajectories))
    return ImportedStep(step=step, groups=groups, metrics=metrics.get(step, {}), source=path)


def _trajectory(path: Path, position: int, number_and_row: tuple[int, dict],
                names: list[str]) -> TrajectoryRecord:
    row_number, row = number_and_row
    where = f"row {row_number}"
    try:
        _, prompt_messages = _text_and_messages(row["prompt"], "user")
        completion, completion_messages = _text_and_messages(row["completion"], "assistant")
    except ValueError as error:
        raise FormatError(path, where, str(error)) from error
    components = {name: number(row[name], path, f"{where}, column {name!r}") for name in names}
    finite = {k: v for k, v in components.items() if math.isfinite(v)}
    advantage = row.get("advantage")
    messages = prompt_messages + completion_messages
    return TrajectoryRecord(
        index=position,
        messages=messages,
        completion=completion,
        reward=(finite_or_zero(number(row["reward"], path, f"{where}, column 'reward'"))
                if "reward" in row else finite_or_zero(sum(finite.values()))),
        components=finite,
        details={k: v for k, v in row.items()
                 if k not in FIXED_COLUMNS and k not in names and v is not None},
        advantage=finite_or_zero(number(advantage, path, f"{where}, column 'advantage'")),
        tool_calls=tool_calls_of(messages),  # GRPOTrainer(tools=...): the calls in its multi-turn completions
    )


def read(path: Path) -> ImportedRun:
    """Every completions file under ``path`` as one run (see the module doc).

    Raises:
        FormatError: no completions file, or a malformed one.
    """
    files = completion_files(path)
    if not files:
        raise FormatError(path, "", "no completions/completions_NNNNN.parquet files (run TRL's "
                          "GRPOTrainer with log_completions=True)")
    state = _trainer_state(path)
    metrics = logged_metrics(state)
    steps = [read_step(f, metrics) for f in files]
    return ImportedRun(format=NAME, scenario="trl", config={},
                       manifest={"imported_from": str(path), "format": NAME,
                                 "files": [str(f) for f in files]},
                       steps=steps)


def write(run: Mapping[str, Any], steps: list[ImportedStep], out_dir: Path) -> dict[str, Path]:
    """Write ``steps`` as a TRL output_dir: ``completions/completions_{step:05d}.parquet``
    (``step``, ``prompt``, ``completion``, one column per reward function,
    ``reward`` (the weighted total, which TRL's files lack), ``advantage``)
    and ``trainer_state.json`` with the step metrics as ``log_history``.
    Returns ``{"completions": folder, "trainer_state": file}``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = out_dir / "completions"
    folder.mkdir(parents=True, exist_ok=True)
    for step in steps:
        trajectories = [(g.prompt, t) for g in step.groups for t in g.trajectories]
        names = list(dict.fromkeys(k for _, t in trajectories for k in t.components))
        table = {"step": [step.step] * len(trajectories),
                 "prompt": [prompt for prompt, _ in trajectories],
                 "completion": [t.completion for _, t in trajectories],
                 **{name: [t.components.get(name) for _, t in trajectories] for name in names},
                 "reward": [t.reward for _, t in trajectories],
                 "advantage": [t.advantage for _, t in trajectories]}
        pq.write_table(pa.table(table), folder / f"completions_{step.step:05d}.parquet")
    history = [{"step": s.step, **{k: v for k, v in s.metrics.items()
                                   if isinstance(v, (int, float)) and not isinstance(v, bool)}}
               for s in steps]
    state = out_dir / "trainer_state.json"
    state.write_text(json.dumps({"global_step": steps[-1].step if steps else 0,
                                 "log_history": history}, indent=1), encoding="utf-8")
    return {"completions": folder, "trainer_state": state}


def logged_table(buffer: dict) -> tuple[list[str], list[dict]]:
    """GRPOTrainer's in-memory ``_logs`` buffer (``prompt``, ``completion``,
    ``rewards``: {name: values}, ``extra``: {column: values}, ``advantages``)
    as the columns and rows of the completions table it writes (what
    ``engine.integrations.trl`` reads live, then :func:`rows_to_step`)."""
    columns = {"prompt": list(buffer.get("prompt", [])),
               "completion": list(buffer.get("completion", [])),
               **{name: list(v) for name, v in (buffer.get("rewards") or {}).items()},
               **{name: list(v) for name, v in (buffer.get("extra") or {}).items()
                  if name not in FIXED_COLUMNS},
               "advantage": list(buffer.get("advantages", []))}
    size = len(columns["prompt"])
    names = list(columns)
    # each deque ends with the newest batch: a column that began later (a reward function
    # of a newer version) is shorter, so align the columns at their ends
    rows = [{name: _from_end(columns[name], size - i) for name in names} for i in range(size)]
    return names, rows


def _from_end(values: list, back: int) -> Any:
    """``values[-back]``, or None when the list is shorter than that."""
    return values[-back] if back <= len(values) else None


def split_groups(groups: list[GroupRecord], size: int | None) -> list[GroupRecord]:
    """Groups of ``size`` (TRL's ``num_generations``): two groups in a row with the same
    prompt (two dataset rows with one text) read as one run of equal prompts; cut it."""
    if not size:
        return groups
    out: list[GroupRecord] = []
    for group in groups:
        n = len(group.trajectories)
        if n <= size or n % size:
            out.append(group)
            continue
        for start in range(0, n, size):
            chunk = group.trajectories[start:start + size]
            for k, t in enumerate(chunk):
                t.index = k
            out.append(replace(group, trajectories=chunk))
    for k, group in enumerate(out):
        group.index = group.example_id = k
    return out
