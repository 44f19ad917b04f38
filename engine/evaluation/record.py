"""An eval or select run written into the run file, so the runs list, the
trajectory inspector, ``rlab export`` and ``rlab compare`` read it like any run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlab.engine.evaluation.measure import Attempt
from rlab.engine.rewards.rubric import Rubric
from rlab.engine.rewards.success import SuccessRule
from rlab.store.records import GroupRecord, TrajectoryRecord
from rlab.store.writer import StoreWriter

STEP = 0
"""Loops A and B write every group at step 0: nothing is trained."""


def group_records(examples: list[dict], attempts: list[list[Attempt]], success: SuccessRule) -> list[GroupRecord]:
    """One group per example holding its attempts (advantage 0: no update), each
    with its ``success`` verdict. A frozen completion's other fields are kept
    in ``details["frozen_fields"]``."""
    return [
        GroupRecord(index=i, example_id=example["id"], prompt=str(example.get("prompt", "")), example=example,
                    trajectories=[
                        TrajectoryRecord(index=j, messages=a.messages, completion=a.completion,
                                         reward=a.reward, components=a.score.components,
                                         details=_details(a), advantage=0.0,
                                         prompt_tokens=a.prompt_tokens,
                                         completion_tokens=a.completion_tokens, reward_version=1,
                                         truncated=a.truncated, success=success.passed(a.score))
                        for j, a in enumerate(row)])
        for i, (example, row) in enumerate(zip(examples, attempts))
    ]


def _details(attempt: Attempt) -> dict[str, Any]:
    """The scorer's details; a frozen line's other fields ride along under
    ``frozen_fields`` (kept, as the completions file format promises)."""
    if not attempt.extra:
        return attempt.score.details
    return {**attempt.score.details, "frozen_fields": attempt.extra}


def start_loop_run(db: Path, *, name: str, kind: str, scenario: str, config: dict[str, Any],
                   manifest: dict[str, Any], rubric: Rubric, reward_file: Path) -> tuple[StoreWriter, int]:
    """Open the writer and create the run (status ``running``); return both.

    Raises:
        ValueError: a run called ``name`` exists already.
    """
    writer = StoreWriter(db)
    try:
        run_id = writer.start_run(name, scenario, config, manifest, reward_file=reward_file, kind=kind)
        writer.write_reward_version(run_id, 1, rubric.source, rubric.weights)
    except BaseException:
        writer.close()
        raise
    return writer, run_id


def finish_loop_run(writer: StoreWriter, run_id: int, examples: list[dict],
                    attempts: list[list[Attempt]], summary: dict[str, Any], success: SuccessRule) -> None:
    """Store the groups (one transaction), the step-0 metrics, the summary;
    mark the run ``finished``."""
    writer.write_groups(run_id, STEP, group_records(examples, attempts, success))
    writer.write_step(run_id, STEP, {"eval/pass_at_1": summary["pass_at_1"],
                                     "reward": summary["mean_reward"]})
    writer.write_summary(run_id, summary)
    writer.set_status(run_id, "finished")
