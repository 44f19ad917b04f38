"""What every format module hands the shared writer, and the helpers they share.

A format module reads another tool's artifacts into an :class:`ImportedRun`
(steps of :class:`rlab.store.records.GroupRecord`) and never touches SQL;
:mod:`rlab.store.formats.write` is the one path into the run file.
"""

from __future__ import annotations

import re

import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlab.store.errors import UsageError
from rlab.store.records import TOOL_ERROR_PREFIX, GroupRecord, ToolCallRecord, TrajectoryRecord
from rlab.store.stepstats import grpo_advantages


class FormatError(UsageError):
    """A file of another tool is not what its format says.

    The message names the file, the place in it (line, row or field) and the
    problem, so the CLI prints it as one ``rlab: error:`` line.
    """

    def __init__(self, path: str | Path, where: str, problem: str) -> None:
        self.path = Path(path)
        self.where = where
        super().__init__(f"{path}: {where}: {problem}" if where else f"{path}: {problem}")


@dataclass
class ImportedStep:
    """One step of an imported run.

    Attributes:
        step: the step number of the source tool (TRL's ``global_step``,
            ART's checkpoint step, verl's ``global_steps``; 0 for evals).
        groups: the step's groups, indices 0..n-1.
        metrics: metrics the tool logged for that step, TRL names where TRL
            has one; metrics computed from ``groups`` fill the gaps.
        source: the file the step came from (for ``watch --follow``).
    """

    step: int
    groups: list[GroupRecord]
    metrics: dict[str, float] = field(default_factory=dict)
    source: Path | None = None


@dataclass
class ImportedRun:
    """Another tool's run, ready to be written as one run of the store.

    Attributes:
        format: the format name (a key of ``rlab.store.formats.FORMATS``).
        scenario: what the run is about (task, environment or dataset name).
        config: the tool's settings worth keeping (JSON-serialisable).
        manifest: provenance: ``{"imported_from": path, "format": ..., ...}``.
        steps: the steps, ascending.
    """

    format: str
    scenario: str
    config: dict
    manifest: dict
    steps: list[ImportedStep]


def read_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """``(line number from 1, object)`` for each non-blank line of a JSONL file.

    Raises:
        FormatError: a line is not JSON, or not a JSON object.
    """
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as error:
                raise FormatError(path, f"line {number}", f"not JSON ({error.msg} at column "
                                  f"{error.colno})") from error
            if not isinstance(value, dict):
                raise FormatError(path, f"line {number}", "expected a JSON object")
            yield number, value


def read_json(path: Path) -> Any:
    """A whole JSON file's value.

    Raises:
        FormatError: not JSON.
    """
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise FormatError(path, f"line {error.lineno}", f"not JSON ({error.msg})") from error


def read_table(path: Path) -> tuple[list[str], list[dict]]:
    """Column names and rows (dicts) of a Parquet file, through pyarrow.

    Raises:
        FormatError: not a readable Parquet file.
    """
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as error:  # pyarrow raises several error types for a bad file
        raise FormatError(path, "", f"not a readable Parquet file ({error})") from error
    return table.column_names, table.to_pylist()


def require(record: dict, key: str, path: Path, where: str) -> Any:
    """``record[key]``.

    Raises:
        FormatError: the field is missing.
    """
    if key not in record:
        raise FormatError(path, where, f"missing field {key!r}")
    return record[key]


def count(value: Any, path: Path, where: str) -> int:
    """``value`` as a whole number of tokens (None, "" and 0 as 0).

    Raises:
        FormatError: not a whole number.
    """
    if not value:
        return 0
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and float(value).is_integer():
        return int(value)
    raise FormatError(path, where, f"expected a whole number of tokens, got {value!r}")


def number(value: Any, path: Path, where: str) -> float:
    """``value`` as a float (bools count as 0/1; None as NaN).

    Raises:
        FormatError: not a number.
    """
    if value is None:
        return math.nan
    if isinstance(value, (bool, int, float)):
        return float(value)
    raise FormatError(path, where, f"expected a number, got {value!r}")


def numeric_items(values: dict) -> dict[str, float]:
    """The entries of ``values`` that are numbers (bools as 0/1), as floats."""
    return {k: float(v) for k, v in values.items() if isinstance(v, (bool, int, float))}


def text_of(content: Any) -> str:
    """The text of an OpenAI message ``content``: a string, or the ``text``
    parts of a list of content parts joined; None gives ''."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def prompt_text(messages: Sequence[dict]) -> str:
    """The prompt shown for a conversation: its last user message before the
    first assistant message (all of its text when there is no user message)."""
    before = []
    for message in messages:
        if message.get("role") == "assistant":
            break
        before.append(message)
    users = [m for m in before if m.get("role") == "user"]
    return text_of((users or before or [{}])[-1].get("content"))


def last_assistant_text(messages: Sequence[dict]) -> str:
    """Text of the conversation's last assistant message ('' if none)."""
    for message in reversed(messages):
        if message.get("role") == "assistant":
            return text_of(message.get("content"))
    return ""


def tool_calls_of(messages: Sequence[dict]) -> list[ToolCallRecord] | None:
    """The tool calls of an OpenAI-format conversation (assistant ``tool_calls``, each
    answered by a ``tool`` message), turn by turn; None when it has neither calls nor
    tool messages (no tools were in play). A tool message answers the call with its
    ``tool_call_id``, or (TRL writes no ids) the call in the same place among the
    turn's calls. A result that starts with ``error: `` is the call's error; a call
    without an answer has result ''. Arguments written as JSON text are decoded (kept
    as ``{"raw": text}`` when not JSON)."""
    if not any(m.get("tool_calls") or m.get("role") == "tool" for m in messages):
        return None
    records: list[ToolCallRecord] = []
    turn = 0
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        calls = message.get("tool_calls") or []
        answers = _following_tools(messages, i + 1)
        by_id = {str(m.get("tool_call_id")): m for m in answers if m.get("tool_call_id") is not None}
        for k, call in enumerate(calls):
            function = call.get("function") or {}
            found = by_id.get(str(call.get("id"))) if call.get("id") is not None else None
            answer = text_of((found or (answers[k] if k < len(answers) and not by_id else {})).get("content"))
            failed = answer.startswith(TOOL_ERROR_PREFIX)
            records.append(ToolCallRecord(
                turn=turn, index=k, call_id=str(call.get("id") or f"call_{turn}_{k}"),
                name=str(function.get("name") or ""), arguments=_arguments(function.get("arguments")),
                result="" if failed else answer, error=answer[len(TOOL_ERROR_PREFIX):] if failed else None))
        turn += 1
    return records


def _following_tools(messages: Sequence[dict], start: int) -> list[dict]:
    """The ``tool`` messages right after position ``start`` (a turn's answers)."""
    out = []
    for message in messages[start:]:
        if message.get("role") != "tool":
            break
        out.append(message)
    return out


def _arguments(raw: Any) -> dict:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        return {"raw": raw}
    return value if isinstance(value, dict) else {"raw": raw}


def group_runs(rows: Sequence[Any], key: Callable[[Any], Any]) -> list[list[Any]]:
    """Split ``rows`` into runs of consecutive rows with equal ``key(row)``.

    TRL and verl repeat each prompt G times in a row (TRL's RepeatSampler,
    verl's ``interleave=True``), so a run of equal prompts is one group.
    """
    out: list[list[Any]] = []
    for row in rows:
        if out and key(out[-1][-1]) == key(row):
            out[-1].append(row)
        else:
            out.append([row])
    return out


def finite_or_zero(value: float) -> float:
    """NaN/inf -> 0.0 (a missing reward counts as 0, as TRL's nansum)."""
    return value if math.isfinite(value) else 0.0


def judge_ranks(trajectories: Sequence[TrajectoryRecord]) -> None:
    """Fill ``judge_rank`` (1 = best judge score) where ``judge_score`` is set;
    ties share the better rank."""
    for trajectory in trajectories:
        if trajectory.judge_score is not None:
            trajectory.judge_rank = 1 + sum(
                1 for t in trajectories
                if t.judge_score is not None and t.judge_score > trajectory.judge_score)


def place_in_group(trajectories: Sequence[TrajectoryRecord], *, advantages: bool = True) -> None:
    """Set each trajectory's ``index`` (its position) and, for tools that
    store no advantages, the GRPO advantage within the group
    (:func:`rlab.store.stepstats.grpo_advantages`) over the scored ones (an
    errored trajectory, reward None, gets 0)."""
    rewards = [t.reward for t in trajectories if t.reward is not None]
    computed = iter(grpo_advantages(rewards).tolist() if advantages and rewards else [])
    for position, trajectory in enumerate(trajectories):
        trajectory.index = position
        if advantages:
            trajectory.advantage = next(computed) if trajectory.reward is not None else 0.0


def step_of(pattern: re.Pattern[str], path: Path) -> int:
    """The step number a file's name carries (``pattern``'s first group).

    Raises:
        FormatError: the name does not match (not a step file of this format).
    """
    found = pattern.search(path.name)
    if found is None:
        raise FormatError(path, "", f"not a step file (its name does not match {pattern.pattern})")
    return int(found.group(1))
