"""Files written by the real tools import as they are.

tests/fixtures/formats/verifiers_real was written by verifiers 0.1.14's own
writer (make_results.py: ``SingleTurnEnv.evaluate_sync(save_results=True)``
with the openai client on a mock transport). The expected values below are
read from those files with json, never copied from rlab's output. The
``live`` tests run the tool again, here, into a temporary folder, and skip
when it is not installed (``pip install -e ".[real-tools]"``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlab.store.formats import import_path
from rlab.store.reader import StoreReader
from rlab.store.stepstats import grpo_advantages

FIXTURES = Path(__file__).parent / "fixtures" / "formats"


def _rows_by_group(db: Path, run_id: int) -> list[list[dict]]:
    with StoreReader(db) as reader:
        [step] = reader.steps(run_id)
        return [reader.group(light["id"])["trajectories"] for light in reader.groups_of_step(run_id, step)]


def _check_verifiers(folder: Path, db: Path) -> None:
    """The import of a verifiers output folder equals its results.jsonl, group by group."""
    lines = [json.loads(line) for line in (folder / "results.jsonl").read_text().splitlines() if line.strip()]
    metadata = json.loads((folder / "metadata.json").read_text())
    by_example: dict[int, list[dict]] = {}
    for line in lines:
        by_example.setdefault(line["example_id"], []).append(line)
    summary = import_path(folder, db)
    assert (summary.format, summary.steps, summary.groups, summary.trajectories) == \
        ("verifiers", 1, len(by_example), len(lines))
    with StoreReader(db) as reader:
        assert reader.run(summary.run_id)["scenario"] == metadata["env_id"]
    groups = _rows_by_group(db, summary.run_id)
    for example_id, rows in zip(sorted(by_example), groups):
        expected = by_example[example_id]
        assert len(rows) == metadata["rollouts_per_example"] == len(expected)
        assert [r["reward"] for r in rows] == [e["reward"] for e in expected]
        assert [r["completion"] for r in rows] == [e["completion"][-1]["content"] for e in expected]
        for row, line in zip(rows, expected):
            for name in ("exact", "brief"):
                assert row["components"][name] == line["metrics"][name]
        assert [r["advantage"] for r in rows] == pytest.approx(grpo_advantages([e["reward"] for e in expected]).tolist())


def test_real_verifiers_outputs_import(tmp_path):
    _check_verifiers(FIXTURES / "verifiers_real", tmp_path / "r.db")
    rewards = sorted(json.loads(line)["reward"]
                     for line in (FIXTURES / "verifiers_real" / "results.jsonl").read_text().splitlines())
    assert len(set(rewards)) > 1, "the fixture needs rewards that differ within a group"


@pytest.mark.skipif(importlib.util.find_spec("verifiers") is None, reason="verifiers not installed "
                    "(pip install -e '.[real-tools]')")
def test_live_verifiers_eval_imports(tmp_path):
    """verifiers writes its outputs again, here (mock transport, no network)."""
    script = FIXTURES / "verifiers_real" / "make_results.py"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "out")], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    _check_verifiers(tmp_path / "out", tmp_path / "r.db")


@pytest.mark.skipif(importlib.util.find_spec("inspect_ai") is None, reason="inspect-ai not installed "
                    "(pip install -e '.[real-tools]')")
def test_live_inspect_eval_imports(tmp_path):
    """Inspect runs capitals_task.py with its mockllm/model again, here, and
    the fresh .eval log imports like the committed one."""
    script = FIXTURES / "inspect_real" / "make_log.py"
    done = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = import_path(tmp_path / "capitals.eval", tmp_path / "r.db")
    assert (summary.format, summary.steps, summary.groups, summary.trajectories) == ("inspect", 1, 2, 4)
    rewards = [r["reward"] for group in _rows_by_group(tmp_path / "r.db", summary.run_id) for r in group]
    assert rewards == [0.0, 0.0, 0.5, 0.5]
