"""Issue 46, 3: a resume takes its run over only once its checkpoint and model
have loaded; one that fails leaves the run's status and rows as they were, and
no child process of it alive."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from rlab.engine.run.config import RunConfig
from rlab.engine.step import run
from rlab.engine.train.checkpoint import CheckpointError
from rlab.store.reader import StoreReader


def _state(db, name):
    with StoreReader(db) as reader:
        row = reader.run_by_name(name)
        assert row is not None
        return (row["status"], row["pid"], reader.steps(row["id"]),
                len(reader.rollouts_since(row["id"], 0, limit=10_000)), len(reader.events(row["id"])))


def test_a_resume_from_a_damaged_checkpoint_leaves_the_run_as_it_was(raw_tiny_model_dir, tmp_path):
    db = tmp_path / "runs.db"
    summary = run(RunConfig(model=raw_tiny_model_dir, db=db, name="r", max_steps=4, prompts_per_step=2,
                            group_size=2, eval_size=4, eval_every=100, checkpoint_every=2))
    assert summary["status"] == "finished"
    with StoreReader(db) as reader:
        (newest,) = [c for c in reader.checkpoints(reader.run_by_name("r")["id"]) if c["step"] == 4]
    damaged = [p for p in Path(newest["path"]).rglob("*") if p.suffix in (".safetensors", ".pt")]
    assert damaged
    for path in damaged:
        path.write_bytes(b"not a checkpoint")
    before = _state(db, "r")

    with pytest.raises(CheckpointError):
        run(RunConfig(db=db, resume="r", max_steps=6))
    assert _state(db, "r") == before
    assert psutil.Process().children(recursive=True) == []
