"""Crash safety: a writer killed with SIGKILL mid-run leaves a sound file."""

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from rlab.store.db import check_run_file, open_db
from rlab.store.reader import StoreReader
from rlab.store.writer import StoreWriter
from test_store_helpers import make_group

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent

# Writes groups of 8 as fast as it can and reports each committed group id.
CHILD = """
import sys
from rlab.store.writer import StoreWriter
from test_store_helpers import make_group
from test_store_helpers import make_group
writer = StoreWriter(sys.argv[1])
run_id = writer.start_run("doomed", "arithmetic", {"steps": 10**6}, {})
step = 0
while True:
    group_id = writer.write_group(run_id, step, make_group(step % 4))
    print(group_id, flush=True)
    if step % 4 == 3:
        writer.write_step(run_id, step, {"reward": 0.5})
    step += 1
"""


def test_sigkill_mid_run_keeps_committed_groups_and_marks_crashed(tmp_path):
    path = tmp_path / "runs.db"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)])}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE,
                             text=True, env=env, cwd=REPO)
    committed = [int(child.stdout.readline()) for _ in range(200)]
    child.send_signal(signal.SIGKILL)
    committed += [int(line) for line in child.stdout.read().split()]
    child.wait(timeout=10)
    assert child.returncode == -signal.SIGKILL

    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # Whole groups or nothing: the group being written at the kill is absent.
    sizes = conn.execute("SELECT COUNT(*) FROM trajectories GROUP BY group_id").fetchall()
    assert {size for (size,) in sizes} == {8}
    conn.close()

    open_db(path, create=False).close()
    reader = StoreReader(path)
    run = reader.run_by_name("doomed")
    assert run["status"] == "crashed" and run["ended_at"] is not None
    assert [e["kind"] for e in reader.events(run["id"])] == ["error"]
    for group_id in committed:
        group = reader.group(group_id)
        assert group is not None and len(group["trajectories"]) == 8


def test_live_runs_and_runs_of_other_hosts_are_not_marked_crashed(tmp_path):
    path = tmp_path / "runs.db"
    with StoreWriter(path) as writer:
        live = writer.start_run("live", "arithmetic", {}, {})
        remote = writer.start_run("remote", "arithmetic", {}, {})
        writer.db.execute("UPDATE runs SET host = 'gpu-box', pid = 999999999 WHERE id = ?",
                          [remote])
        writer.set_status(remote, "paused")
    open_db(path).close()
    reader = StoreReader(path)
    assert reader.run(live)["status"] == "running"
    assert reader.run(remote)["status"] == "paused"


def test_resume_refuses_a_live_engine(tmp_path):
    path = tmp_path / "runs.db"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with StoreWriter(path) as writer:
            run_id = writer.start_run("busy", "arithmetic", {}, {})
            writer.db.execute("UPDATE runs SET pid = ? WHERE id = ?", [sleeper.pid, run_id])
            with pytest.raises(RuntimeError, match=f"still running in process {sleeper.pid}"):
                writer.resume_run(run_id)
    finally:
        sleeper.kill()
        sleeper.wait()


# Opens a read transaction and stays inside it until killed.
READER_CHILD = """
import sys
from rlab.store.reader import StoreReader
reader = StoreReader(sys.argv[1])
with reader._snapshot() as conn:
    conn.execute("SELECT COUNT(*) FROM trajectories").fetchone()
    print("reading", flush=True)
    sys.stdin.read()
"""


def test_killed_reader_never_blocks_the_writer(tmp_path):
    path = tmp_path / "runs.db"
    with StoreWriter(path) as writer:
        run_id = writer.start_run("r", "arithmetic", {}, {})
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(TESTS)])}
        child = subprocess.Popen([sys.executable, "-c", READER_CHILD, str(path)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                 env=env, cwd=REPO)
        assert child.stdout.readline() == "reading\n"
        writer.write_group(run_id, 0, make_group(0))  # while the reader holds a snapshot
        child.kill()
        child.wait(timeout=10)
        writer.write_group(run_id, 1, make_group(1))  # after the reader died mid-read
        writer.set_status(run_id, "finished")
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert conn.execute("SELECT COUNT(*) FROM trajectories").fetchone()[0] == 16


def test_reused_pid_does_not_keep_a_dead_run_alive(tmp_path):
    path = tmp_path / "runs.db"
    with StoreWriter(path) as writer:
        old = writer.start_run("before-reboot", "arithmetic", {}, {})
        # Its engine was last seen in 2001; the pid now belongs to this test process.
        writer.db.execute("UPDATE runs SET heartbeat_at = 1e9 WHERE id = ?", [old])
        live = writer.start_run("live", "arithmetic", {}, {})
    open_db(path).close()
    reader = StoreReader(path)
    assert reader.run(old)["status"] == "crashed"
    assert reader.run(live)["status"] == "running"


# ---- a full disk (issue 33) --------------------------------------------------------------------


def test_a_checkpoint_that_hits_a_full_disk_is_one_clear_error_and_leaves_no_partial(tmp_path, monkeypatch):
    import errno

    import torch

    from rlab.engine.train.checkpoint import CheckpointError, save_checkpoint

    model = torch.nn.Linear(2, 2)
    model.save_pretrained = lambda path, **kw: Path(path).mkdir(parents=True)  # a stand-in for an HF model
    optimizer = torch.optim.AdamW(model.parameters())
    save_checkpoint(tmp_path / "step-000001", model, optimizer, 1)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(CheckpointError, match="step 2 .*No space left on device; free disk space"):
        save_checkpoint(tmp_path / "step-000002", model, optimizer, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-000001"]  # no .partial, the old one kept


def test_a_file_whose_last_checkpoint_was_cut_short_is_read_from_its_wal(tmp_path):
    """The main file shorter than its header says, the rest in the WAL: intact, not "truncated"."""
    path = tmp_path / "runs.db"
    with StoreWriter(path) as writer:
        writer.start_run("r", "arithmetic", {}, {})
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("CREATE TABLE filler (x BLOB)")
    conn.execute("INSERT INTO filler VALUES (zeroblob(200000))")
    conn.commit()
    header = path.read_bytes()[:100]
    size = path.stat().st_size
    patched = bytearray(header)  # the header claims the pages a cut-short checkpoint did not write
    pages = int.from_bytes(header[28:32], "big") + 50
    patched[28:32] = pages.to_bytes(4, "big")
    with path.open("r+b") as handle:
        handle.write(bytes(patched))
    assert path.stat().st_size == size and (tmp_path / "runs.db-wal").stat().st_size > 0
    check_run_file(path, writable=False)  # no "truncated": the WAL holds the rest
    conn.close()


def test_a_dead_engines_run_reads_crashed_where_the_file_cannot_be_written(tmp_path, monkeypatch):
    path = tmp_path / "runs.db"
    with StoreWriter(path) as writer:
        run_id = writer.start_run("gone", "arithmetic", {}, {})
        writer.db.execute("UPDATE runs SET pid = ? WHERE id = ?", [2**22 + 12345, run_id])  # no such process

    def cannot_write(*args, **kwargs):  # a full disk, or a read-only copy: opening cannot mark the run
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr("rlab.store.reader.open_db", cannot_write)
    reader = StoreReader(path)
    assert reader.run(run_id)["status"] == "crashed" and reader.runs()[0]["status"] == "crashed"
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT status FROM runs").fetchone()[0] == "running"  # the file says otherwise
    conn.close()


def test_a_full_disk_while_the_weights_are_written_is_one_error_whose_advice_resume_takes(tmp_path, monkeypatch,
                                                                                           raw_tiny_model_dir):
    """safetensors reports a full disk as a SafetensorError (not an OSError); the advice
    (resume with --keep-checkpoints 1) must be one a resume takes (issue 40, 4.4)."""
    from safetensors import SafetensorError
    from transformers import PreTrainedModel

    from rlab.engine.run.config import RunConfig
    from rlab.engine.step import RunCrashed, run
    from rlab.engine.train.checkpoint import CheckpointError

    def full(self, *args, **kwargs):
        raise SafetensorError("Error while serializing: IoError(Os { code: 28, kind: StorageFull, "
                              "message: \"No space left on device\" })")

    db = tmp_path / "full.db"
    config = RunConfig(model=raw_tiny_model_dir, db=db, name="full", max_steps=3, prompts_per_step=2, group_size=2,
                       eval_size=4, eval_every=100, checkpoint_every=2)
    with monkeypatch.context() as patched:
        patched.setattr(PreTrainedModel, "save_pretrained", full)
        with pytest.raises(RunCrashed, match="StorageFull.*rlab run --headless --resume full --db .* "
                                             "--keep-checkpoints 1") as crashed:
            run(config)
    assert isinstance(crashed.value.__cause__, CheckpointError)
    assert not list((tmp_path / "rlab_runs").rglob("*.partial"))
    summary = run(RunConfig(db=db, resume="full", keep_checkpoints=1, max_steps=3))  # the advice, taken
    assert summary["status"] == "finished" and summary["last_step"] == 3


def test_damage_is_found_by_the_page_check_or_by_the_read_that_meets_it(tmp_path):
    """Issue 39: `rlab watch` no longer checks every page of a 3 GB file first; a read that
    meets a damaged page names the damage and the recovery, as the page check does."""
    from fixtures.smalldb import build_small_db
    from rlab.store.db import RunFileError

    path = tmp_path / "runs.db"
    ids = build_small_db(path)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'trajectories'").fetchone()
    conn.close()
    with path.open("r+b") as handle:  # the trajectories table's root page (pages count from 1), header first
        handle.seek(page_size * (root - 1))
        handle.write(b"\xff" * (page_size // 4))
    with pytest.raises(RunFileError, match="is damaged"):
        check_run_file(path, writable=False)
    check_run_file(path, writable=False, pages=False)  # the header is sound
    with StoreReader(path) as reader:
        assert [run["name"] for run in reader.runs()] == ["demo", "gigpo-demo"]  # pages it does not meet
        with pytest.raises(RunFileError, match=r"is damaged: database disk image is malformed.*\.recover"):
            reader.rollouts_since(ids["gigpo-demo"], 0)


def test_checking_a_new_run_file_never_makes_it_appear(tmp_path):
    """The writability probe must not create the run file itself: a reader polling for the
    file (the TUI, `rlab watch`) would open it between its creation and removal and fail."""
    import threading

    path = tmp_path / "new.db"
    seen = []
    done = threading.Event()

    def poll():
        while not done.is_set():
            if path.exists():
                seen.append(True)
                return

    watcher = threading.Thread(target=poll)
    watcher.start()
    try:
        for _ in range(300):
            check_run_file(path, writable=True)
    finally:
        done.set()
        watcher.join()
    assert not seen and list(tmp_path.iterdir()) == []
