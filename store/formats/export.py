"""A stored run in another tool's layout (``rlab export RUN --format ...``).

The run is read back into the records the engine and the importers write
(:class:`rlab.store.records.GroupRecord`), and the format module writes
them, so ``export`` followed by ``import`` gives the same trajectories and
rewards (tests/test_formats_roundtrip.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rlab.store.db import existing_run_file
from rlab.store.formats import art, trl, verifiers
from rlab.store.formats.base import ImportedStep
from rlab.store.reader import StoreReader, resolve_run
from rlab.store.records import GroupRecord, ToolCallRecord, TrajectoryRecord

Writer = Callable[[Mapping[str, Any], list[ImportedStep], Path], dict[str, Path]]
EXPORT_FORMATS: dict[str, Writer] = {
    verifiers.NAME: verifiers.write,
    trl.NAME: trl.write,
    art.NAME: art.write,
}
"""Format name -> the function writing a run in that layout."""


def _trajectory(row: Mapping[str, Any]) -> TrajectoryRecord:
    return TrajectoryRecord(
        index=row["idx"], messages=row["messages"], completion=row["completion"],
        reward=row["reward"], components=row["components"], details=row["details"],
        advantage=row["advantage"], prompt_tokens=row["prompt_tokens"],
        completion_tokens=row["completion_tokens"], reward_version=row["reward_version"],
        judge_score=row["judge_score"], judge_rank=row["judge_rank"],
        judge_explanation=row["judge_explanation"], truncated=bool(row["truncated"]),
        tool_calls=None if row.get("tool_calls") is None else [
            ToolCallRecord(turn=c["turn"], index=c["idx"], call_id=c["call_id"], name=c["name"],
                           arguments=c["arguments"], result=c["result"], error=c["error"], seconds=c["seconds"])
            for c in row.get("calls") or []])


def stored_steps(reader: StoreReader, run_id: int) -> list[ImportedStep]:
    """The run's steps as records (superseded groups left out), ascending,
    each with the metrics stored for it."""
    metrics = {row.pop("step"): row for row in reader.step_metrics(run_id)}
    steps = []
    for step in reader.steps(run_id):
        groups = []
        for light in reader.groups_of_step(run_id, step):
            group = reader.group(light["id"])
            if group is None:  # removed since groups_of_step read it
                continue
            groups.append(GroupRecord(
                index=group["idx"], example_id=group["example_id"], prompt=group["prompt"],
                trajectories=[_trajectory(t) for t in group["trajectories"]],
                initial_state_key=group["initial_state_key"], judge_status=group["judge_status"],
                judge_error=group["judge_error"], example=group["example"]))
        steps.append(ImportedStep(step=step, groups=groups, metrics=metrics.get(step, {})))
    return steps


def export_as(db_path: str | Path, run: int | str, out_dir: str | Path,
              format: str) -> dict[str, Path]:
    """Write run ``run`` (name or id) of ``db_path`` into ``out_dir`` in
    ``format``'s layout; return what was written (name -> path).

    Raises:
        FileNotFoundError: no file at ``db_path``.
        KeyError: no such run, or an unknown format.
    """
    if format not in EXPORT_FORMATS:
        raise KeyError(f"cannot export as {format!r}; use one of {', '.join(EXPORT_FORMATS)}")
    existing_run_file(db_path)
    with StoreReader(db_path) as reader:
        row = resolve_run(reader, run)
        steps = stored_steps(reader, row["id"])
    return EXPORT_FORMATS[format](row, steps, Path(out_dir))
