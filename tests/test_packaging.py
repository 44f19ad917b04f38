"""One import namespace: every package folder installs under ``rlab.``, and a
user's own folders named like ours never shadow the installed modules."""

from __future__ import annotations

import json
import runpy
import shutil
import subprocess
import sys
import tomllib

import pytest
from pathlib import Path

from rlab.engine.cli.options import engine_command

ROOT = Path(__file__).resolve().parents[1]
TOP_LEVEL = ("engine", "store", "tui", "scenarios")


def test_setup_finds_every_package_folder_under_the_namespace():
    setup = runpy.run_path(str(ROOT / "setup.py"), run_name="rlab_setup")
    on_disk = {"rlab." + ".".join(init.parent.relative_to(ROOT).parts)
               for top in TOP_LEVEL for init in (ROOT / top).rglob("__init__.py")}
    assert set(setup["rlab_packages"]()) == on_disk
    assert setup["TOP_LEVEL"] == TOP_LEVEL
    assert "packages" not in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"].get("setuptools", {}), \
        "a package list in pyproject.toml would have to be edited by hand for each new scenario"


def _shadowing_folders(cwd: Path) -> None:
    """Folders named like ours (and like the namespace) whose import fails loudly."""
    for name in (*TOP_LEVEL, "rlab"):
        (cwd / name).mkdir()
        (cwd / name / "__init__.py").write_text(f"raise ImportError('the user folder {name}/ was imported')\n")


def test_engine_is_spawned_so_the_working_directory_cannot_shadow_it():
    cmd = engine_command(["--db", "x.db"], db=Path("x.db"), name="name")
    assert cmd[:3] == [sys.executable, "-P", "-m"], "without -P, python -m puts the working directory first"


def test_the_engine_command_line_names_the_run_file_and_the_run_once():
    """Issue 47, 4: `rlab run --db x.db` spawned the engine with `--db x.db ... --db x.db`."""
    for argv in (["--db", "x.db", "--name", "mine"], ["--db=x.db", "--name=mine"]):
        cmd = engine_command(argv, db=Path("x.db"), name="mine")
        assert sum(a.startswith("--db") for a in cmd) == 1 and sum(a.startswith("--name") for a in cmd) == 1
    # the run file the config resolved, and the name the TUI chose
    assert engine_command([], db=Path("runs.db"), name="chosen")[-4:] == ["--db", "runs.db", "--name", "chosen"]


@pytest.mark.e2e
def test_a_run_in_a_folder_holding_engine_and_scenarios_uses_ours(tmp_path, raw_tiny_model_dir):
    _shadowing_folders(tmp_path)
    rlab = shutil.which("rlab", path=str(Path(sys.executable).parent))
    assert rlab, "the rlab console script is not installed beside this interpreter"
    result = subprocess.run([rlab, "run", "--headless", "--model", str(raw_tiny_model_dir), "--db", "run.db",
                             "--max-steps", "1", "--prompts-per-step", "2", "--group-size", "2",
                             "--eval-size", "4"], cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1])["status"] == "finished"
    assert "was imported" not in result.stderr


def test_the_reward_sandbox_child_ignores_the_working_directory(tmp_path, monkeypatch):
    from rlab.engine.rewards.edit.check import validate

    _shadowing_folders(tmp_path)
    monkeypatch.chdir(tmp_path)
    source = (ROOT / "scenarios" / "arithmetic" / "rewards.py").read_text()
    result = validate(source, [{"a": 1, "b": 2, "answer": "3"}], ["3"])
    assert result.ok, result.message


@pytest.mark.parametrize("module", ["rlab.engine.cli", "rlab.tui.cli"])
def test_python_m_runs_the_command_line_under_both_names(module, tmp_path):
    """`python -m rlab.tui.cli` is the name older scripts and the GPU kit call; it is the same
    command line as `python -m rlab.engine.cli`."""
    done = subprocess.run([sys.executable, "-P", "-m", module, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("usage: ") and "inspect" in done.stdout, done.stderr
    done = subprocess.run([sys.executable, "-P", "-m", module, "runs", "--db", str(tmp_path / "none.db")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("rlab: error: no run file at"), done.stderr
