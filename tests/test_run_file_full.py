"""Issue 47, 6: a full disk while writing the run file said only "database or
disk is full", with no path and no fix (the checkpoint case had both).

SQLite's own SQLITE_FULL is produced on demand with ``PRAGMA max_page_count``
(the file may grow no further on that connection): the real error a full disk
gives, without filling one."""

from __future__ import annotations

import pytest

from rlab.engine.cli.errors import handled
from rlab.engine.cli.run import run_headless
from rlab.engine.run.config import RunConfig
from rlab.store.db import RunFileFullError
from rlab.store.reader import StoreReader
from rlab.store.writer import StoreWriter
from test_store_helpers import make_group


def _no_more_pages(writer: StoreWriter) -> None:
    pages = writer.database.execute("PRAGMA page_count").fetchone()[0]
    writer.database.execute(f"PRAGMA max_page_count = {pages}")


def test_a_full_disk_names_the_file_and_the_fix_and_loses_nothing_stored(tmp_path):
    path = tmp_path / "runs.db"
    with StoreWriter(path) as writer:
        run_id = writer.start_run("full", "arithmetic", {}, {})
        writer.write_groups(run_id, 0, [make_group(0)])
        _no_more_pages(writer)
        with pytest.raises(RunFileFullError) as caught:
            writer.write_groups(run_id, 1, [make_group(i, completion_chars=4000) for i in range(8)])
    message = str(caught.value)
    assert str(path) in message and "disk is full" in message and "free disk space" in message
    with StoreReader(path) as reader:
        assert [g["step"] for g in reader.groups_of_step(run_id, 0)] == [0]
        assert reader.groups_of_step(run_id, 1) == []


def test_a_run_that_fills_the_disk_ends_with_one_line_naming_the_file_and_how_to_resume(
        raw_tiny_model_dir, tmp_path, monkeypatch, capsys):
    real, calls = StoreWriter.write_step_whole, []

    def on_a_full_disk(self, *args, **kwargs):  # the disk fills while step 2 is written
        calls.append(1)
        if len(calls) == 2:
            _no_more_pages(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(StoreWriter, "write_step_whole", on_a_full_disk)
    db = tmp_path / "runs.db"
    config = RunConfig(model=raw_tiny_model_dir, db=db, name="full", max_steps=3, prompts_per_step=2,
                       group_size=2, eval_size=4, eval_every=100, checkpoint_every=100)
    assert handled(lambda: run_headless(config), config.db) == 2

    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("rlab: error:")]
    assert line == (f"rlab: error: cannot write the run file {db}: the disk is full (the last write was rolled "
                    "back, nothing stored is lost); free disk space there, or move the file to a disk with room, "
                    f"then resume the run: rlab run --headless --resume full --db {db}")
    with StoreReader(db) as reader:
        assert reader.steps(reader.run_by_name("full")["id"]) == [0, 1]
