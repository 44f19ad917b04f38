"""Frozen completions: a results.jsonl file scored again without any model.

Each line is a JSON object with ``example_id`` and ``completion`` (the
fields ``rlab export`` and ``rlab eval --out`` write); other fields are kept
as they are. A file that has been tampered with is refused, naming the line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlab.store.errors import UsageError


class CompletionsFileError(UsageError):
    """A frozen completions file that cannot be scored as it is; the message
    names the file, the line (1-based) and the fix."""


@dataclass
class FrozenCompletion:
    """One line of a completions file: the example it answers, the text,
    the line number (1-based) and every other field of the line."""

    example_id: Any
    completion: str
    line: int
    extra: dict[str, Any] = field(default_factory=dict)


def read_completions(path: Path, dataset: list[dict]) -> list[FrozenCompletion]:
    """The completions of ``path``, checked against the split ``dataset``.

    Blank lines are skipped. Returns the completions in file order.

    Raises:
        FileNotFoundError: no file at ``path``.
        CompletionsFileError: a line is not a JSON object, has no
            ``example_id`` or no string ``completion``, names an example id
            that is not in ``dataset``, or repeats an id of an earlier line.
    """
    if not path.is_file():
        raise FileNotFoundError(f"no completions file at {path}; pass the results.jsonl "
                                "of an earlier eval (rlab eval --out DIR, or rlab export)")
    known = {example["id"] for example in dataset}
    seen: dict[Any, int] = {}
    out = []
    with path.open(encoding="utf-8") as handle:
        for number, text in enumerate(handle, start=1):
            if not text.strip():
                continue
            item = _parse_line(path, number, text)
            example_id = item.pop("example_id")
            if example_id not in known:
                raise CompletionsFileError(
                    f"{path} line {number}: example id {example_id!r} is not in the dataset "
                    "split being evaluated; check --scenario and --split, or remove the line")
            if example_id in seen:
                raise CompletionsFileError(
                    f"{path} line {number}: example id {example_id!r} repeats line "
                    f"{seen[example_id]}; keep one completion per example")
            seen[example_id] = number
            out.append(FrozenCompletion(example_id, item.pop("completion"), number, item))
    return out


def _parse_line(path: Path, number: int, text: str) -> dict[str, Any]:
    try:
        item = json.loads(text)
    except json.JSONDecodeError as err:
        raise CompletionsFileError(f"{path} line {number}: not valid JSON ({err.msg}); "
                                   "each line must be one JSON object") from err
    if not isinstance(item, dict):
        raise CompletionsFileError(f"{path} line {number}: a JSON object is needed, "
                                   f"got {type(item).__name__}")
    if "example_id" not in item:
        raise CompletionsFileError(f"{path} line {number}: no example_id; every line names "
                                   "the dataset example it answers")
    if not isinstance(item.get("completion"), str):
        what = "no completion" if item.get("completion") is None else "a completion that is not text"
        raise CompletionsFileError(f"{path} line {number}: {what}; every line needs "
                                   '"completion": "..."')
    return item
