"""Which checkpoints to keep on disk: the last K, the best by held-out eval, every fork's start,
and those taken off the schedule (at an alert, a reward edit, a setting change).

A checkpoint holds the weights (or LoRA adapter) and the optimizer state, so
an unpruned run grows by one model-and-a-half per checkpoint (the README's
"Disk" section has figures). The newest checkpoint is always kept: it is
the one ``--resume`` continues from. A checkpoint a fork started from
(``rlab fork RUN@STEP``) is kept too: the fork's lineage names it, and a
second fork from the same point must find it. So is one taken at an alert's
step or just before a reward edit or setting change (``engine.step``): the
point a fork tests a fix from.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from rlab.store.db import write_transaction
from rlab.store.writer import StoreWriter


@dataclass(frozen=True)
class Checkpoint:
    """A recorded checkpoint: its store id, training step, directory, the
    held-out pass@1 stored for that step (None: no eval at that step), and
    whether a fork started from it; ``pinned``: it was taken off the schedule
    (an alert, a reward edit, a setting change)."""

    id: int
    step: int
    path: Path
    eval: float | None
    forked: bool = False
    pinned: bool = False


def to_prune(checkpoints: list[Checkpoint], keep_last: int) -> list[Checkpoint]:
    """The checkpoints to delete: all but the ``keep_last`` newest (by step),
    the best by held-out eval (highest pass@1; the newer on a tie),
    those a fork started from and the pinned ones. ``keep_last`` 0 keeps every checkpoint;
    otherwise at least the newest one is kept (resume needs it)."""
    if keep_last <= 0:
        return []
    by_step = sorted(checkpoints, key=lambda c: (c.step, c.id))
    kept = {c.id for c in by_step[-keep_last:]} | {c.id for c in by_step if c.forked or c.pinned}
    scored = [c for c in by_step if c.eval is not None]
    if scored:
        kept.add(max(scored, key=lambda c: (c.eval, c.step)).id)
    return [c for c in by_step if c.id not in kept]


def prune_checkpoints(writer: StoreWriter, run_id: int, keep_last: int) -> list[Path]:
    """Delete the checkpoints :func:`to_prune` picks; return their directories.

    Each row is removed from the store before its directory is deleted, so a
    crash in between leaves an unlisted directory (space), never a listed
    checkpoint without files. The rows are read and removed in one
    transaction, the one a fork's start also takes (``StoreWriter.start_fork``):
    a fork either pins its checkpoint first, or finds it gone and says so.
    A disabled writer records no checkpoints, so nothing is pruned then.
    """
    if not writer.enabled:
        return []
    with write_transaction(writer.database):
        rows = [Checkpoint(r["id"], r["step"], Path(r["path"]), r["eval"], bool(r["forked"]), r["reason"] is not None)
                for r in writer.checkpoints(run_id)]
        doomed = to_prune(rows, keep_last)
        for checkpoint in doomed:
            writer.forget_checkpoint(run_id, checkpoint.id)
    # A directory recorded twice (a step checkpointed again) stays if any record of it stays.
    kept_paths = {c.path for c in rows if c not in doomed}
    pruned = [c.path for c in doomed if c.path not in kept_paths]
    for path in pruned:
        shutil.rmtree(path, ignore_errors=True)
    return pruned
