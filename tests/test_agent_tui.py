"""The TUI on a user agent's run (issue 56, item 6): its endpoint figures in the header, its
trajectories turn by turn in the inspector, from a real headless run through the endpoint."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import textwrap

import pytest
from rich.console import Console

from rlab.store.reader import StoreReader
from rlab.tui.app import RolloutLabApp
from rlab.tui.dashboard import DashboardScreen
from rlab.tui.inspector import conversation
from test_tui_snapshots import SIZE, settled

TASK = textwrap.dedent('''
    train = "train.jsonl"
    rewards = "rewards.py"
    agent = "rollout.py"
''')
REWARDS = textwrap.dedent('''
    def said_something(example, completion):
        return float(any(m["role"] == "assistant" and m.get("content") for m in completion))
''')
ROLLOUT = textwrap.dedent('''
    async def rollout(client, model, example):
        messages = [{"role": "user", "content": example["prompt"]}]
        for _ in range(2):
            reply = await client.chat.completions.create(model=model, messages=messages, max_tokens=4)
            messages += [reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "more"}]
        return messages[:-1]
''')


@pytest.mark.e2e
async def test_an_agent_run_shows_its_endpoint_and_its_turns(raw_tiny_model_dir, tmp_path):
    for name, text in (("task.toml", TASK), ("rewards.py", REWARDS), ("rollout.py", ROLLOUT)):
        (tmp_path / name).write_text(text)
    (tmp_path / "train.jsonl").write_text("".join(json.dumps({"id": i, "prompt": f"{i}+1=", "answer": str(i + 1)}) + "\n"
                                                  for i in range(20)))
    db = tmp_path / "agent.db"
    done = subprocess.run(
        [sys.executable, "-P", "-m", "rlab.engine.cli", "run", "--headless", "--model", str(raw_tiny_model_dir),
         "--task", str(tmp_path / "task.toml"), "--db", str(db), "--name", "door", "--max-steps", "2",
         "--prompts-per-step", "2", "--group-size", "2", "--eval-size", "2", "--eval-every", "1000"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    run = StoreReader(db).run_by_name("door")
    app = RolloutLabApp(db, run_id=run["id"])
    async with app.run_test(size=(200, 40)) as pilot:
        await settled("down", "t")(pilot)
        dashboard = next(s for s in app.screen_stack if isinstance(s, DashboardScreen))
        assert " · endpoint 8 req, width " in dashboard.sub_title  # 2 x 2 rollouts of 2 requests
        console = Console(width=200, record=True, file=io.StringIO())
        console.print(conversation(app.view.trajectory))
        text = console.export_text()
    # each sampled turn with its GiGPO line, the agent's own message between them
    assert "assistant\nturn 0 · r " in text and "user\nmore\n\nassistant\nturn 1 · r " in text
