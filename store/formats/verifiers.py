"""verifiers evaluation outputs: ``results.jsonl`` beside ``metadata.json``.

``vf-eval`` (verifiers' ``save_outputs``) writes one JSON object per rollout
to ``results.jsonl``: ``example_id``, ``prompt`` and ``completion`` (chat
messages, or text for completion-style environments), ``answer``, ``info``,
``task``, ``reward``, ``metrics`` (reward-function name -> value),
``is_truncated``, ``stop_condition``, ``error``, ``timing``, ``token_usage``
(``input_tokens``, ``output_tokens``). Older releases wrote each reward
function's value as a top-level key instead of ``metrics``. ``metadata.json``
holds ``env_id``, ``model``, ``num_examples``, ``rollouts_per_example``,
``sampling_args``, ``avg_reward``, ``pass_at_k``, ...

The ``rollouts_per_example`` rollouts of one ``example_id`` form a group;
the whole evaluation is step 0. Advantages are the GRPO ones
(r_i - mean r) / (std r + 1e-4) within the group (std ddof 1), since an
evaluation has none of its own.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlab.store.formats.base import (
    count,
    FormatError,
    place_in_group,
    ImportedRun,
    ImportedStep,
    finite_or_zero,
    last_assistant_text,
    number,
    numeric_items,
    prompt_text,
    read_json,
    read_jsonl,
    require,
    text_of,
)
from rlab.store.records import GroupRecord, TrajectoryRecord

NAME = "verifiers"
RESULTS = "results.jsonl"
METADATA = "metadata.json"
KNOWN_FIELDS = {
    "example_id", "id", "prompt", "completion", "answer", "info", "task", "reward", "metrics",
    "is_completed", "is_truncated", "stop_condition", "error", "error_chain", "long_error_chain",
    "timing", "token_usage", "tool_defs", "trajectory", "generation_ms", "scoring_ms", "total_ms",
}


def _files(path: Path) -> tuple[Path, Path]:
    folder = path.parent if path.is_file() else path
    return folder / RESULTS, folder / METADATA


def detect(path: Path) -> bool:
    """Whether ``path`` is (or holds) a verifiers results.jsonl with its metadata.json."""
    results, metadata = _files(path)
    return results.is_file() and metadata.is_file()


def _messages(value, role: str) -> list[dict]:
    if value is None:
        return []
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    if isinstance(value, list) and all(isinstance(m, dict) for m in value):
        return value
    raise ValueError(f"expected text or a list of chat messages, got {type(value).__name__}")


def _trajectory(path: Path, line: int, record: dict) -> TrajectoryRecord:
    where = f"line {line}"
    try:
        prompt = _messages(record.get("prompt"), "user")
        completion = _messages(record.get("completion"), "assistant")
    except ValueError as error:
        raise FormatError(path, where, str(error)) from error
    errored = record.get("reward") is None and bool(record.get("error"))  # scoring failed: no reward
    reward = None if errored else number(require(record, "reward", path, where), path, f"{where}, field 'reward'")
    metrics = record.get("metrics")
    if metrics is not None and not isinstance(metrics, dict):
        raise FormatError(path, f"{where}, field 'metrics'", "expected an object of numbers")
    components = numeric_items(metrics if metrics is not None else
                               {k: v for k, v in record.items() if k not in KNOWN_FIELDS})
    usage = record.get("token_usage") or {}
    details = {k: record[k] for k in ("answer", "info", "task", "stop_condition", "error",
                                      "timing") if record.get(k) not in (None, "", {})}
    return TrajectoryRecord(
        index=0, messages=prompt + completion,
        completion=(record["completion"] if isinstance(record.get("completion"), str)
                    else last_assistant_text(completion)),
        reward=None if reward is None else finite_or_zero(reward),
        components={k: v for k, v in components.items() if math.isfinite(v)},
        details=details, advantage=0.0,
        prompt_tokens=count(usage.get("input_tokens"), path, f"{where}, field 'token_usage.input_tokens'"),
        completion_tokens=count(usage.get("output_tokens"), path, f"{where}, field 'token_usage.output_tokens'"),
        truncated=bool(record.get("is_truncated", False)),
    )


def read(path: Path) -> ImportedRun:
    """A verifiers evaluation as a one-step run (see the module doc).

    Raises:
        FormatError: a missing file, a line that is not JSON, a missing
            ``example_id``/``reward``, a field of the wrong type.
    """
    results, metadata_path = _files(path)
    for needed in (results, metadata_path):
        if not needed.is_file():
            raise FormatError(needed, "", "missing (a verifiers output folder has results.jsonl "
                              "and metadata.json)")
    metadata = read_json(metadata_path)
    if not isinstance(metadata, dict):
        raise FormatError(metadata_path, "", "expected a JSON object")
    by_example: dict = {}
    prompts: dict = {}
    for line, record in read_jsonl(results):
        key = record.get("example_id", record.get("id"))
        if key is None:
            raise FormatError(results, f"line {line}", "missing field 'example_id'")
        trajectory = _trajectory(results, line, record)
        by_example.setdefault(key, []).append(trajectory)
        prompts.setdefault(key, (record.get("prompt"), record.get("answer"), record.get("info")))
    if not by_example:
        raise FormatError(results, "", "no rollouts")
    groups = []
    for index, (example_id, trajectories) in enumerate(by_example.items()):
        place_in_group(trajectories)
        prompt, answer, info = prompts[example_id]
        text = prompt if isinstance(prompt, str) else prompt_text(_messages(prompt, "user"))
        groups.append(GroupRecord(index=index, example_id=example_id, prompt=text_of(text),
                                  trajectories=trajectories,
                                  example={"id": example_id, "prompt": prompt, "answer": answer,
                                           "info": info}))
    config = {k: metadata[k] for k in ("env_id", "env_args", "model", "base_url", "num_examples",
                                       "rollouts_per_example", "sampling_args") if k in metadata}
    logged = numeric_items({f"pass@{k}": v for k, v in (metadata.get("pass_at_k") or {}).items()})
    return ImportedRun(
        format=NAME, scenario=str(metadata.get("env_id") or metadata.get("env") or "verifiers"),
        config=config,
        manifest={"imported_from": str(path), "format": NAME, "metadata": metadata},
        steps=[ImportedStep(step=0, groups=groups, metrics=logged, source=results)])


def write(run: Mapping[str, Any], steps: list[ImportedStep], out_dir: Path) -> dict[str, Path]:
    """Write ``steps`` as a verifiers output folder (``results.jsonl`` +
    ``metadata.json``). Every group becomes one ``example_id`` (numbered
    through the run; the stored example id and step go to ``info``); the
    conversation splits at its first assistant message into ``prompt`` and
    ``completion`` (a tool episode's calls and results stay in it as OpenAI
    messages; the run's tool schemas go to ``tool_defs``). Returns
    ``{"results": path, "metadata": path}``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    results = out_dir / RESULTS
    rewards: list[float] = []
    tools = ((run.get("manifest") or {}).get("tools") or {}).get("schemas")
    groups = [(s.step, g) for s in steps for g in s.groups]
    with results.open("w", encoding="utf-8") as out:
        for example_id, (step, group) in enumerate(groups):
            for t in group.trajectories:
                split = next((i for i, m in enumerate(t.messages) if m.get("role") == "assistant"),
                             len(t.messages))
                if t.reward is not None:
                    rewards.append(t.reward)
                error = {"error": t.details["error"]} if t.details.get("error") else {}
                out.write(json.dumps({
                    "example_id": example_id, "prompt": t.messages[:split],
                    "completion": t.messages[split:], "answer": (group.example or {}).get("answer", ""),
                    "info": {"step": step, "example_id": group.example_id}, "task": run["scenario"],
                    "reward": t.reward, "metrics": t.components, "is_completed": True,
                    "is_truncated": t.truncated,
                    "token_usage": {"input_tokens": t.prompt_tokens,
                                    "output_tokens": t.completion_tokens},
                    **({"tool_defs": tools} if tools else {}), **error},
                    ensure_ascii=False) + "\n")
    metadata = out_dir / METADATA
    metadata.write_text(json.dumps({
        "env_id": run["scenario"], "model": (run.get("config") or {}).get("model") or "rlab",
        "num_examples": len(groups),
        "rollouts_per_example": max((len(g.trajectories) for _, g in groups), default=0),
        "sampling_args": {k: v for k, v in (run.get("config") or {}).items()
                          if k in ("temperature", "max_new_tokens")},
        "avg_reward": sum(rewards) / len(rewards) if rewards else None,
        "rlab_run": run["name"]}, indent=1, default=str), encoding="utf-8")
    return {"results": results, "metadata": metadata}
