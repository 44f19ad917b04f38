"""TRL for real with tools (issue 45): GRPOTrainer(tools=[...]) on the calculator's tiny
policy, with RlabCallback: its multi-turn completions are stored turn by turn, each call
in the tool_calls table, and our tools/calls_mean equals TRL's own tools/call_frequency.

Needs the test-only extra (``pip install -e ".[dev,trl]"``); about 20 s:

    .venv/bin/python -m pytest -q -m slow tests/test_tools_trl.py
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlab.store.reader import StoreReader

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_grpo_trainer_with_tools_stores_its_calls_turn_by_turn(tmp_path):
    pytest.importorskip("trl", reason="needs trl: pip install -e '.[dev,trl]'")
    db = tmp_path / "runs.db"
    done = subprocess.run([sys.executable, str(REPO / "tests" / "trl_tools_grpo.py"), "--out", str(tmp_path / "out"),
                           "--steps", "3", "--rlab-db", str(db)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    with StoreReader(db) as reader:
        [run] = reader.runs()
        metrics = reader.step_metrics(run["id"])
        calls = 0
        for step in reader.steps(run["id"]):
            for light in reader.groups_of_step(run["id"], step):
                for t in reader.group(light["id"])["trajectories"]:
                    assert t["tool_calls"] == len(t["calls"])  # every completion: tools were offered
                    for call in t["calls"]:
                        calls += 1
                        assert call["name"] in ("add", "multiply") and call["error"] is None
                        roles = [m["role"] for m in t["messages"]]
                        assert roles[2:4] == ["assistant", "tool"] and call["result"] == t["messages"][3]["content"]
    assert calls > 0, "the calculator policy calls its tools about a third of the time"
    for row in metrics:
        if "tools/call_frequency" in row:
            assert row["tools/calls_mean"] == pytest.approx(row["tools/call_frequency"])
