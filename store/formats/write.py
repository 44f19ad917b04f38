"""The one path from an imported run into the run file (through StoreWriter)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlab.store.db import write_transaction
from rlab.store.formats.base import ImportedRun, ImportedStep, tool_calls_of
from rlab.store.stepstats import step_stats
from rlab.store.writer import StoreWriter


@dataclass
class ImportSummary:
    """What an import wrote: the run and its counts."""

    run_id: int
    name: str
    format: str
    steps: int
    groups: int
    trajectories: int


def free_name(writer: StoreWriter, wanted: str) -> str:
    """``wanted``, or ``wanted-2``, ``wanted-3``... : the first name no run
    in the file has yet."""
    name, n = wanted, 1
    while writer.database.execute("SELECT 1 FROM runs WHERE name = ?", [name]).fetchone():
        n += 1
        name = f"{wanted}-{n}"
    return name


def append_steps(writer: StoreWriter, run_id: int, steps: list[ImportedStep]) -> None:
    """Write ``steps`` (groups, then metrics) into run ``run_id``.

    A trajectory's tool calls, when the tool did not give them, are read from its
    OpenAI-format messages (:func:`rlab.store.formats.base.tool_calls_of`). A
    step's metrics are those computed from its groups
    (:func:`rlab.store.stepstats.step_stats`) overlaid by the ones the tool
    logged itself, so a logged value always wins. Call inside a transaction
    (``write_transaction(writer.database)``) to make the whole append atomic.
    """
    for step in steps:
        for trajectory in (t for g in step.groups for t in g.trajectories if t.tool_calls is None):
            trajectory.tool_calls = tool_calls_of(trajectory.messages)
        writer.write_groups(run_id, step.step, step.groups)
        writer.write_step(run_id, step.step, {**step_stats(step.groups), **step.metrics})


def write_imported(db_path: str | Path, run: ImportedRun, *, name: str | None = None,
                   status: str = "finished") -> ImportSummary:
    """Write ``run`` as a new run of the file, in one transaction: either the
    whole run is there afterwards, or nothing is.

    Args:
        db_path: the run file (created if missing).
        run: what a format module read.
        name: the run name; default ``{source folder or file stem}-{format}``,
            made unique with a ``-N`` suffix.
        status: the run's status afterwards (``running`` while following).

    Raises:
        ValueError: ``name`` is given and already taken, or a value is not
            JSON-serialisable or not a number where one is needed.
    """
    steps = sorted(run.steps, key=lambda s: s.step)
    with StoreWriter(db_path) as writer:
        with write_transaction(writer.database):
            if name is None:
                source = Path(run.manifest["imported_from"])
                name = free_name(writer, f"{source.stem or source.name}-{run.format}")
            run_id = writer.start_run(name, run.scenario, run.config, run.manifest)
            append_steps(writer, run_id, steps)
            writer.set_status(run_id, status)
    return ImportSummary(
        run_id=run_id, name=name, format=run.format, steps=len(steps),
        groups=sum(len(s.groups) for s in steps),
        trajectories=sum(len(g.trajectories) for s in steps for g in s.groups))
