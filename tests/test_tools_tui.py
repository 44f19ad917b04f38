"""The TUI on a tool-using agent's run (issue 45): the inspector's conversation turn by turn
with calls and results marked, and the group view's calls per trajectory.

Update after an intended visual change with ``pytest --snapshot-update tests/test_tools_tui.py``.
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from fixtures.agentdb import build_agent_db
from rlab.tui.app import RolloutLabApp
from rlab.tui.inspector import conversation
from test_tui_snapshots import SIZE, settled


@pytest.fixture
def agent_db(tmp_path):
    path = tmp_path / "agent.db"
    return path, build_agent_db(path)


def test_inspector_shows_the_conversation_turn_by_turn(snap_compare, agent_db):
    path, run_id = agent_db
    app = RolloutLabApp(path, run_id=run_id)
    assert snap_compare(app, terminal_size=SIZE, run_before=settled("down", "down", "t"))


def test_group_view_shows_each_trajectory_s_calls(snap_compare, agent_db):
    path, run_id = agent_db
    app = RolloutLabApp(path, run_id=run_id)
    assert snap_compare(app, terminal_size=SIZE, run_before=settled("g"))


async def test_the_inspector_marks_calls_results_and_errors(agent_db):
    path, run_id = agent_db
    app = RolloutLabApp(path, run_id=run_id)
    async with app.run_test(size=SIZE) as pilot:
        await settled("down", "down", "t")(pilot)
        console = Console(width=200, record=True, file=io.StringIO())
        console.print(conversation(app.view.trajectory))
        text = console.export_text()
        assert "assistant · turn 0" in text and "→ call multiply(a=\"two\")" in text
        assert "✗ multiply" in text and "error: bad arguments for multiply" in text
        assert "← add · 0.001 s" in text and "assistant · turn 2" in text


def test_the_inspector_marks_a_call_that_did_not_parse():
    """Issue 59, item 7: the malformed call's answer (a ``user`` error message) is marked ``✗``
    as the group view marks it, not shown as a user's turn."""
    problem = "the tool call is not valid JSON (Expecting value at character 1); write <tool_call>..."
    trajectory = {
        "messages": [{"role": "user", "content": "What is 2 * 3?"},
                     {"role": "assistant", "content": "<tool_call>{oops}</tool_call>"},
                     {"role": "user", "content": f"error: {problem}"},
                     {"role": "user", "content": "error: an error the user wrote is theirs"},
                     {"role": "assistant", "content": "6"}],
        "calls": [{"turn": 0, "idx": 0, "call_id": "call_0_0", "name": "", "arguments": {}, "result": "",
                   "error": problem, "seconds": 0.0}],
    }
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(conversation(trajectory))
    text = console.export_text()
    assert "✗ call did not parse\nerror: the tool call is not valid JSON" in text
    assert "user\nerror: an error the user wrote is theirs" in text  # one failed call, one mark
