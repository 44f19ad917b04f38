"""A run whose policy is still being built is a run you can stop (issue 59, item 2): `rlab stop`
finds the build by the run's name and ends it within a second of SIGTERM, and the TUI's `q`
during the build asks, as it does during a run. Both through the real engine, building the
arithmetic scenario's tiny policy for seed 1 (not shipped) into an empty cache."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlab.engine.train.building import find_build, marker_path
from rlab.tui.app import RolloutLabApp
from rlab.tui.dialogs import QuitScreen

RLAB = Path(sys.executable).with_name("rlab")


def _engine_command(db: Path, name: str) -> list[str]:
    return [sys.executable, "-P", "-m", "rlab.engine", "--scenario", "arithmetic", "--seed", "1",
            "--db", str(db), "--name", name, "--max-steps", "1"]


def _wait_for_build(db: Path, name: str, process: subprocess.Popen, limit_s: float = 90.0) -> None:
    """Until the build's marker is there and the build has run a little (a step is in progress)."""
    deadline = time.monotonic() + limit_s
    while find_build(db, name) is None:
        assert process.poll() is None, "the engine exited before its build began"
        assert time.monotonic() < deadline, "the build did not begin"
        time.sleep(0.1)
    time.sleep(3.0)


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLAB_CACHE_DIR", str(tmp_path / "cache"))


def test_rlab_stop_ends_a_build_within_a_second_and_leaves_no_run(tmp_path, empty_cache):
    db = tmp_path / "runs.db"
    engine = subprocess.Popen(_engine_command(db, "zorb"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)
    try:
        _wait_for_build(db, "zorb", engine)
        started = time.monotonic()
        stop = subprocess.run([str(RLAB), "stop", "zorb", "--db", str(db)], capture_output=True, text=True,
                              timeout=60)
        engine.wait(10)
        ended = time.monotonic() - started
    finally:
        if engine.poll() is None:
            os.killpg(engine.pid, 9)
    assert stop.returncode == 0, stop.stderr
    assert "stopped the build of run zorb" in stop.stdout
    assert engine.returncode == -15  # SIGTERM's default action, not a handler after the step
    print(f"the build ended {ended:.2f} s after rlab stop began")
    assert ended < 5.0, f"the build took {ended:.1f} s to end"  # a step of the build takes 4-40 s
    assert not marker_path(db, "zorb").exists()  # rlab stop removed what SIGTERM left no time for
    assert not db.exists()  # the run never began: the file is as it was
    again = subprocess.run([str(RLAB), "stop", "zorb", "--db", str(db)], capture_output=True, text=True,
                           timeout=60)
    assert again.returncode == 2 and "no run file" in again.stderr  # nothing left to stop


async def test_q_during_a_build_asks_and_stop_ends_the_engine(tmp_path, empty_cache):
    db = tmp_path / "runs.db"
    app = RolloutLabApp(db, run_name="zorb", engine_cmd=_engine_command(db, "zorb"))
    async with app.run_test(size=(120, 40)) as pilot:
        assert app.supervisor is not None
        deadline = time.monotonic() + 90
        while find_build(db, "zorb") is None:
            assert time.monotonic() < deadline, "the build did not begin"
            await pilot.pause(0.1)
        await pilot.press("q")
        await pilot.pause(0.2)
        assert isinstance(app.screen, QuitScreen)  # it asks, as during a run
        await pilot.press("s")
        deadline = time.monotonic() + 10
        while app.supervisor.running:
            assert time.monotonic() < deadline, "the engine was not stopped"
            await pilot.pause(0.1)
    assert app.supervisor.process is not None and app.supervisor.process.returncode == -15
    assert not marker_path(db, "zorb").exists()
