"""The three real agent shapes of examples/agents/, each run unchanged by its own package for one
engine step through `rlab run --agent` (task.toml's `agent`): an ART rollout function, a verifiers
MultiTurnEnv (not a ToolEnv) driven by its own rollout loop, an OpenAI Agents SDK agent with a
function tool. Each must reach the endpoint and leave its turns in the run file.

Run with: python -m pytest -q -m agents (after pip install -e ".[agents]"); skipped without the
packages. The policy is the untrained tiny model: what is checked is the door, not what a random
policy answers.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.agents


@pytest.mark.parametrize("shape, package", [("art_shape", "art"), ("verifiers_shape", "verifiers"),
                                            ("agents_sdk_shape", "agents")])
def test_a_real_agent_package_trains_one_step_through_the_endpoint(shape, package, raw_tiny_model_dir, tmp_path):
    pytest.importorskip(package)
    db = tmp_path / "runs.db"
    done = subprocess.run(
        [sys.executable, "-P", "-m", "rlab.engine.cli", "run", "--headless", "--task", str(ROOT / "examples/agents" / shape),
         "--model", str(raw_tiny_model_dir), "--db", str(db), "--name", shape, "--max-steps", "1",
         "--prompts-per-step", "2", "--group-size", "2", "--eval-size", "2", "--eval-every", "1000"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    with sqlite3.connect(db) as conn:
        metrics = json.loads(conn.execute("SELECT metrics FROM steps WHERE step = 1").fetchone()[0])
        trajectories = conn.execute("SELECT messages, details FROM trajectories WHERE step = 1").fetchall()
        turns = conn.execute("SELECT COUNT(*) FROM turns WHERE step = 1").fetchone()[0]
    assert len(trajectories) == 4 and metrics["endpoint/requests"] >= 4 and turns >= 4
    errors = [json.loads(d).get("agent_error") for _, d in trajectories]
    assert errors == [None] * 4, errors  # the package ran to its end each time, whatever the policy wrote
    for messages, _ in trajectories:
        roles = [m["role"] for m in json.loads(messages)]
        assert "user" in roles and "assistant" in roles
