"""Inspect AI ``.eval`` logs: a ZIP with ``header.json`` and ``samples/{id}_epoch_{n}.json``.

``header.json`` is the log without samples: ``eval`` (the EvalSpec: ``task``,
``model``, ``dataset``, ``config``...), ``results`` and ``stats``. Each
sample file is an ``EvalSample``: ``id``, ``epoch``, ``input`` (text or chat
messages), ``target``, ``messages`` (the whole conversation), ``output``
(``completion``, ``choices``, ``usage`` with ``input_tokens`` and
``output_tokens``), ``scores`` (scorer name -> ``Score``: ``value``,
``answer``, ``explanation``, ``metadata``) and ``metadata``.

The epochs of one sample ``id`` form a group; the whole log is step 0.
Score values become floats as Inspect's ``value_to_float`` does: "C" 1,
"I" 0, "P" 0.5, "N" 0, yes/true 1, no/false 0, numeric strings as numbers;
a dict value gives one component per key (``scorer/key``). The reward is the
mean of the components; a scorer's ``explanation`` (the first one that is
not the model's answer echoed, as rule-based scorers do) is the judge explanation, since Inspect's
model-graded scorers put the grader's reasoning there. Advantages are GRPO's within the group.
"""

from __future__ import annotations

import json
import math
import sys
import zipfile
from pathlib import Path

from rlab.store.formats.base import (
    count,
    FormatError,
    place_in_group,
    ImportedRun,
    ImportedStep,
    last_assistant_text,
    numeric_items,
    prompt_text,
    text_of,
)
from rlab.store.records import GroupRecord, TrajectoryRecord

if sys.version_info < (3, 14):
    # Inspect compresses members with zstd (ZIP method 93), which the stdlib
    # reads only from 3.14; this package registers it (as Inspect itself does).
    import zipfile_zstd  # noqa: F401

NAME = "inspect"
HEADER = "header.json"
SAMPLES = "samples/"
_LETTERS = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0, "yes": 1.0, "no": 0.0,
            "true": 1.0, "false": 0.0}


def detect(path: Path) -> bool:
    """Whether ``path`` is a ZIP holding ``header.json`` (an Inspect .eval log)."""
    if not path.is_file() or not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return HEADER in archive.namelist()


def score_float(value, path: Path, where: str) -> float:
    """A scalar score value as a float (module doc).

    Raises:
        FormatError: a string that is neither a known letter/word nor a number.
    """
    if isinstance(value, (bool, int, float)):
        return float(value)
    if value is None:
        return math.nan
    text = str(value).strip()
    if text in _LETTERS or text.lower() in _LETTERS:
        return _LETTERS[text] if text in _LETTERS else _LETTERS[text.lower()]
    try:
        return float(text)
    except ValueError:
        raise FormatError(path, where, f"score value {value!r} is not a number, a letter "
                          "C/I/P/N or yes/no") from None


def _components(path: Path, where: str, scores: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for scorer, score in scores.items():
        if not isinstance(score, dict) or "value" not in score:
            raise FormatError(path, f"{where}, scores.{scorer}", "expected a Score with a 'value'")
        value = score["value"]
        if isinstance(value, dict):
            for key, item in value.items():
                out[f"{scorer}/{key}"] = score_float(item, path, f"{where}, scores.{scorer}.{key}")
        elif isinstance(value, list):
            for key, item in enumerate(value):
                out[f"{scorer}/{key}"] = score_float(item, path, f"{where}, scores.{scorer}[{key}]")
        else:
            out[scorer] = score_float(value, path, f"{where}, scores.{scorer}")
    return out


def _trajectory(path: Path, name: str, sample: dict) -> TrajectoryRecord:
    where = name
    scores = sample.get("scores") or {}
    if not isinstance(scores, dict):
        raise FormatError(path, f"{where}, field 'scores'", "expected an object of Scores")
    components = {k: v for k, v in _components(path, where, scores).items() if math.isfinite(v)}
    messages = sample.get("messages") or []
    if isinstance(sample.get("input"), str) and not messages:
        messages = [{"role": "user", "content": sample["input"]}]
    output = sample.get("output") or {}
    completion = output.get("completion") or last_assistant_text(messages)
    if not any(m.get("role") == "assistant" for m in messages) and completion:
        messages = [*messages, {"role": "assistant", "content": completion}]
    # Rule-based scorers (match, includes...) echo the model's answer as their
    # explanation; only another text is a grader's reasoning.
    echoes = {str(v).strip().lower() for v in
              [completion, *(s.get("answer") for s in scores.values())] if v}
    explanations = [s["explanation"] for s in scores.values()
                    if s.get("explanation") and s["explanation"].strip().lower() not in echoes]
    usage = output.get("usage") or {}
    return TrajectoryRecord(
        index=0,
        messages=[{"role": m.get("role"), "content": text_of(m.get("content"))} for m in messages],
        completion=completion,
        reward=sum(components.values()) / len(components) if components else 0.0,
        components=components,
        details={"target": sample.get("target"), "epoch": sample.get("epoch"),
                 "scores": {k: {f: s.get(f) for f in ("answer", "explanation", "metadata")
                                if s.get(f) is not None} for k, s in scores.items()}},
        advantage=0.0,
        prompt_tokens=count(usage.get("input_tokens"), path, f"{where}, field 'output.usage.input_tokens'"),
        completion_tokens=count(usage.get("output_tokens"), path, f"{where}, field 'output.usage.output_tokens'"),
        judge_explanation=explanations[0] if explanations else None,
        truncated=any(c.get("stop_reason") == "max_tokens" for c in output.get("choices") or []),
    )


def _load(archive: zipfile.ZipFile, path: Path, name: str) -> dict:
    try:
        value = json.loads(archive.read(name))
    except json.JSONDecodeError as error:
        raise FormatError(path, f"{name} line {error.lineno}", f"not JSON ({error.msg})") from error
    if not isinstance(value, dict):
        raise FormatError(path, name, "expected a JSON object")
    return value


def read(path: Path) -> ImportedRun:
    """An Inspect .eval log as a one-step run (module doc).

    Raises:
        FormatError: not a ZIP with header.json, a member that is not JSON,
            a sample without ``id``, a score value that is not a number.
    """
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as error:
        raise FormatError(path, "", f"not an Inspect .eval log (a ZIP file): {error}") from error
    with archive:
        names = archive.namelist()
        if HEADER not in names:
            raise FormatError(path, HEADER, "missing (an Inspect .eval log has header.json)")
        header = _load(archive, path, HEADER)
        samples = sorted(n for n in names if n.startswith(SAMPLES) and n.endswith(".json"))
        if not samples:
            raise FormatError(path, SAMPLES, "no samples in the log")
        by_id: dict = {}
        raw_input: dict = {}
        for name in samples:
            sample = _load(archive, path, name)
            if "id" not in sample:
                raise FormatError(path, name, "missing field 'id'")
            by_id.setdefault(sample["id"], []).append((sample.get("epoch") or 0,
                                                       _trajectory(path, name, sample)))
            raw_input.setdefault(sample["id"], sample)
    groups = []
    for index, (sample_id, pairs) in enumerate(by_id.items()):
        trajectories = [t for _, t in sorted(pairs, key=lambda p: p[0])]
        place_in_group(trajectories)
        first = raw_input[sample_id]
        prompt = (first["input"] if isinstance(first.get("input"), str)
                  else prompt_text(first.get("input") or trajectories[0].messages))
        groups.append(GroupRecord(index=index, example_id=sample_id, prompt=text_of(prompt),
                                  trajectories=trajectories,
                                  example={"id": sample_id, "input": first.get("input"),
                                           "target": first.get("target")}))
    spec = header.get("eval") or {}
    results = header.get("results") or {}
    metrics = {f"{s.get('name')}/{m}": v.get("value")
               for s in results.get("scores") or [] for m, v in (s.get("metrics") or {}).items()
               if isinstance(v, dict)}
    return ImportedRun(
        format=NAME, scenario=str(spec.get("task") or "inspect"),
        config={k: spec[k] for k in ("task", "model", "task_args", "model_generate_config")
                if k in spec},
        manifest={"imported_from": str(path), "format": NAME, "eval_id": spec.get("eval_id"),
                  "run_id": spec.get("run_id"), "status": header.get("status")},
        steps=[ImportedStep(step=0, groups=groups, metrics=numeric_items(metrics), source=path)])
