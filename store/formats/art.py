"""OpenPipe ART trajectories: ``{model_dir}/trajectories/{split}/{step:04d}.jsonl|.parquet``.

Two layouts, both read here:

- legacy JSONL: one ``TrajectoryGroup`` per line, ``{"trajectories": [...]}``,
  each trajectory ``{"messages_and_choices", "reward", "metrics",
  "metadata", "logs", "tools", "additional_histories"}``; an item of
  ``messages_and_choices`` is a chat message, or an OpenAI ``Choice``
  (``{"finish_reason", "index", "message"}``: the policy's own turn);
- Parquet (ART's ``write_trajectory_groups_parquet``): one row per
  trajectory with ``group_index``, ``trajectory_index``, ``group_json`` and
  ``trajectory_json`` (the whole models as JSON text, authoritative), plus
  query columns (``reward``, ``metrics``, ``messages``...). Files of the
  first Parquet version lack the JSON columns; their ``messages`` column
  (``role``, ``content``, ``trainable``) is read then.

RULER (``art.rewards.ruler_score_group``) keeps the reward from before
judging in ``metrics["independent_reward"]``, writes the judge's score to
``metrics["ruler_score"]`` (and ``reward``), and logs
``"RULER explanation: ..."``: these become ``judge_score``, the judge rank
within the group and ``judge_explanation``. The other numeric ``metrics``
(``independent_reward`` among them) are the reward components. The step is the file name's number; the split is
``train`` unless ``path`` names another split folder.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlab.store.formats.base import (
    step_of,
    FormatError,
    place_in_group,
    ImportedRun,
    ImportedStep,
    finite_or_zero,
    judge_ranks,
    last_assistant_text,
    number,
    numeric_items,
    prompt_text,
    read_jsonl,
    read_table,
)
from rlab.store.records import GroupRecord, TrajectoryRecord

NAME = "art"
FILE_PATTERN = re.compile(r"^(\d+)\.(jsonl|parquet)$")
RULER_PREFIX = "RULER explanation: "


def trajectory_files(path: Path, split: str = "train") -> list[Path]:
    """The step files of one split under ``path`` (a model dir, its
    ``trajectories`` dir, a split dir, or one file), by step; when a step
    has both a .jsonl and a .parquet file, the .parquet one."""
    if path.is_file():
        return [path] if FILE_PATTERN.match(path.name) else []
    for folder in (path / "trajectories" / split, path / split, path):
        if folder.is_dir():
            by_step: dict[int, Path] = {}
            for file in sorted(folder.iterdir()):
                match = FILE_PATTERN.match(file.name)
                if match and (int(match.group(1)) not in by_step or file.suffix == ".parquet"):
                    by_step[int(match.group(1))] = file
            if by_step:
                return [by_step[s] for s in sorted(by_step)]
    return []


def detect(path: Path) -> bool:
    """Whether ``path`` holds ART trajectory files (``NNNN.jsonl|parquet``
    whose content looks like ART's)."""
    files = trajectory_files(path)
    if not files:
        return False
    first = files[0]
    if first.suffix == ".parquet":
        return "group_index" in read_table(first)[0]
    with first.open(encoding="utf-8") as lines:
        return '"trajectories"' in lines.readline()


def _message(item: dict) -> dict:
    """A chat message from a ``messages_and_choices`` item (a Choice gives
    its ``message``)."""
    if "finish_reason" in item and isinstance(item.get("message"), dict):
        return {k: v for k, v in item["message"].items() if v is not None}
    return {k: v for k, v in item.items() if v is not None}


def _explanation(logs: list | None) -> str | None:
    found = [str(line)[len(RULER_PREFIX):] for line in logs or []
             if str(line).startswith(RULER_PREFIX)]
    return found[-1] if found else None


def trajectory_record(path: Path, where: str, data: dict) -> TrajectoryRecord:
    """One ART trajectory dict as a record (index and advantage set later).

    Raises:
        FormatError: ``messages_and_choices`` is not a list of objects, or
            ``reward``/``metrics`` have the wrong type.
    """
    items = data.get("messages_and_choices")
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise FormatError(path, f"{where}, field 'messages_and_choices'",
                          "expected a list of chat messages or choices")
    metrics = data.get("metrics") or {}
    if not isinstance(metrics, dict):
        raise FormatError(path, f"{where}, field 'metrics'", "expected an object")
    messages = [_message(i) for i in items]
    ruler = metrics.get("ruler_score")
    return TrajectoryRecord(
        index=0, messages=messages, completion=last_assistant_text(messages),
        reward=finite_or_zero(number(data.get("reward"), path, f"{where}, field 'reward'")),
        components={k: v for k, v in numeric_items(metrics).items()
                    if math.isfinite(v) and k != "ruler_score"},
        details={k: data[k] for k in ("metadata", "logs", "tools") if data.get(k)},
        advantage=0.0,
        judge_score=None if ruler is None else number(ruler, path, f"{where}, metrics.ruler_score"),
        judge_explanation=_explanation(data.get("logs")),
    )


def build_group(index: int, trajectories: list[TrajectoryRecord], metadata: dict | None = None
                ) -> GroupRecord:
    """A group from its records: positions, GRPO advantages on the stored
    rewards (ART computes them at training time, not in the files) and
    judge ranks."""
    place_in_group(trajectories)
    judge_ranks(trajectories)
    judged = any(t.judge_score is not None for t in trajectories)
    prompt = prompt_text(trajectories[0].messages) if trajectories else ""
    return GroupRecord(index=index, example_id=(metadata or {}).get("id", index), prompt=prompt,
                       trajectories=trajectories, judge_status="ok" if judged else None,
                       example=metadata or None)


def _read_jsonl(path: Path) -> list[GroupRecord]:
    groups: list[GroupRecord] = []
    for line, record in read_jsonl(path):
        trajectories = record.get("trajectories")
        if not isinstance(trajectories, list):
            raise FormatError(path, f"line {line}, field 'trajectories'",
                              "expected a list (one TrajectoryGroup per line)")
        records = [trajectory_record(path, f"line {line}, trajectory {i}", t)
                   for i, t in enumerate(trajectories)]
        if records:
            groups.append(build_group(len(groups), records, record.get("metadata")))
    return groups


def _json_cell(path: Path, where: str, value) -> dict:
    if value is None:
        return {}
    try:
        data = json.loads(value)
    except (TypeError, json.JSONDecodeError) as error:
        raise FormatError(path, where, f"not JSON text ({error})") from error
    if not isinstance(data, dict):
        raise FormatError(path, where, "expected a JSON object")
    return data


def _parquet_trajectory(path: Path, number_: int, row: dict) -> TrajectoryRecord:
    where = f"row {number_}"
    if row.get("trajectory_json") is not None:
        return trajectory_record(path, where, _json_cell(path, f"{where}, column 'trajectory_json'",
                                                         row["trajectory_json"]))
    messages = row.get("messages") or []
    if not all(isinstance(m, dict) and isinstance(m.get("role"), str) and "content" in m for m in messages):
        raise FormatError(path, f"{where}, column 'messages'", "expected chat messages with 'role' and 'content'")
    messages = [{"role": m["role"], "content": m["content"]} for m in messages]
    return trajectory_record(path, where, {
        "messages_and_choices": messages, "reward": row.get("reward"),
        "metrics": _json_cell(path, f"{where}, column 'metrics'", row.get("metrics")),
        "metadata": _json_cell(path, f"{where}, column 'metadata'", row.get("metadata")),
        "logs": row.get("logs") or []})


def _read_parquet(path: Path) -> list[GroupRecord]:
    columns, rows = read_table(path)
    if "group_index" not in columns:
        raise FormatError(path, "column 'group_index'", "missing (not an ART trajectories file?)")
    by_group: dict[int, list[tuple[int, TrajectoryRecord]]] = {}
    metadata: dict[int, dict] = {}
    for number_, row in enumerate(rows):
        group_index = row["group_index"]
        if not isinstance(group_index, int):
            raise FormatError(path, f"row {number_}, column 'group_index'", "expected an integer")
        by_group.setdefault(group_index, [])
        group = _json_cell(path, f"row {number_}, column 'group_json'", row.get("group_json"))
        metadata.setdefault(group_index, group.get("metadata") or {})
        if row.get("trajectory_json") is None and row.get("messages") is None:
            continue  # an empty group's sentinel row
        order = row.get("trajectory_index")
        by_group[group_index].append((number_ if order is None else order,
                                      _parquet_trajectory(path, number_, row)))
    return [build_group(i, [t for _, t in sorted(by_group[g], key=lambda x: x[0])], metadata[g])
            for i, g in enumerate(sorted(g for g in by_group if by_group[g]))]


def read(path: Path, split: str = "train") -> ImportedRun:
    """Every step file of ``split`` under ``path`` as one run (module doc).

    Raises:
        FormatError: no step files, or a malformed one (file, line or row,
            and field named).
    """
    files = trajectory_files(path, split)
    if not files:
        raise FormatError(path, "", f"no ART trajectory files (trajectories/{split}/NNNN.jsonl "
                          "or .parquet)")
    steps = [ImportedStep(step=step_of(FILE_PATTERN, f),
                          groups=_read_parquet(f) if f.suffix == ".parquet" else _read_jsonl(f),
                          source=f)
             for f in files]
    return ImportedRun(format=NAME, scenario="art", config={"split": split},
                       manifest={"imported_from": str(path), "format": NAME,
                                 "files": [str(f) for f in files]},
                       steps=steps)


def _art_item(message: dict) -> dict:
    """A chat message as an item of ``messages_and_choices``: the policy's
    own (assistant) turns as Choices, so ART would train on them."""
    if message.get("role") == "assistant":
        return {"finish_reason": "stop", "index": 0, "message": message}
    return message


def write(run: Mapping[str, Any], steps: list[ImportedStep], out_dir: Path) -> dict[str, Path]:
    """Write ``steps`` as ART's legacy layout: ``trajectories/train/{step:04d}.jsonl``,
    one TrajectoryGroup per line. Components go to ``metrics``; a judge
    score to ``metrics["ruler_score"]`` with its explanation logged as RULER
    does; a tool task's schemas go to ``tools``, its calls and results stay in the
    messages. Returns ``{"trajectories": folder}``."""
    folder = out_dir / "trajectories" / "train"
    folder.mkdir(parents=True, exist_ok=True)
    tools = ((run.get("manifest") or {}).get("tools") or {}).get("schemas")
    for step in steps:
        with (folder / f"{step.step:04d}.jsonl").open("w", encoding="utf-8") as out:
            for group in step.groups:
                trajectories = []
                for t in group.trajectories:
                    metrics = dict(t.components)
                    logs = []
                    if t.judge_score is not None:
                        metrics["ruler_score"] = t.judge_score
                    if t.judge_explanation:
                        logs.append(RULER_PREFIX + t.judge_explanation)
                    trajectories.append({
                        "messages_and_choices": [_art_item(m) for m in t.messages],
                        "reward": t.reward, "metrics": metrics, "logs": logs,
                        "metadata": {"example_id": group.example_id}, "tools": tools or None,
                        "additional_histories": []})
                out.write(json.dumps({"trajectories": trajectories}, ensure_ascii=False) + "\n")
    return {"trajectories": folder}
