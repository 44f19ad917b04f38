"""Pilot tests of the TUI on a run that goes on while it is watched (issue 40,
what a newcomer met): the fixed small run file, with new steps written by the
test as the engine would write them.
"""

from __future__ import annotations

import sys

from textual.widgets import DataTable, Log, TextArea

from fixtures.smalldb import _single_turn_group
from rlab.store.writer import StoreWriter
from rlab.tui.app import RolloutLabApp
from rlab.tui.dialogs import QuitScreen
from rlab.engine.paths import engine_log_path
from rlab.tui.engine_log import EngineLogScreen
from rlab.tui.group_view import GroupScreen
from rlab.tui.supervisor import EngineSupervisor
from test_tui_app import SIZE, commands, db, loaded, until  # noqa: F401 - db is a fixture


def write_steps(path, run_id: int, steps: range, groups: int = 8) -> None:
    """New steps of ``groups`` groups of 4 trajectories, as the engine writes them."""
    with StoreWriter(path) as writer:
        for step in steps:
            writer.write_groups(run_id, step, [_single_turn_group(step, g, 2) for g in range(groups)])
            writer.write_step(run_id, step, {"reward": 0.5})


async def test_enter_on_a_rollout_row_that_a_poll_pushed_out_opens_it(db, monkeypatch):
    """The tables redraw at most twice a second; between two redraws a poll
    may replace every recent rollout the table still shows (a step of the
    default run writes more than the feed keeps). Enter on such a row opened
    nothing: StopIteration. The redraw is held back here, so the table shows
    the old rows while the feed holds only new ones, every time."""
    monkeypatch.setattr("rlab.tui.dashboard.REDRAW_SECONDS", 3600.0)
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        table = app.screen.query_one("#rollouts", DataTable)
        await until(pilot, lambda: table.row_count == 20)
        table.focus()
        table.move_cursor(row=table.row_count - 1)
        key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        step = table.get_row(key)[0]
        write_steps(path, ids["demo"], range(8, 10))  # 64 new rollouts: the feed keeps 50
        await until(pilot, lambda: app.feed.last_step == 9)
        assert key not in {str(r["id"]) for r in app.feed.rollouts}
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, GroupScreen))
        await until(pilot, lambda: app.view.trajectory is not None)
        assert (app.view.cursor.step, app.view.trajectory["id"]) == (step, int(key))


async def test_typing_in_the_reward_editor_edits_the_file_not_the_run(db):
    """``e`` opens the editor with the keyboard in its text: the app's keys
    (space pauses, n steps, r opens the runs, ? the help) are letters there."""
    from rlab.tui.reward_editor import RewardEditorScreen

    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("e")
        await until(pilot, lambda: isinstance(app.screen, RewardEditorScreen))
        editor = app.screen
        await pilot.press("home", "n", "space", "r", "question_mark")
        await pilot.pause(0.3)
        await app.workers.wait_for_complete()
        assert app.screen is editor
        assert editor.query_one("#re-source", TextArea).text.startswith("n r?")
    assert commands(path, ids["demo"]) == []


async def test_a_new_run_never_shows_the_previous_runs_last_log_line(tmp_path):
    """Until its run appears, the header shows the new engine's newest log
    line; every run the TUI starts logs to its own file, so the previous run's
    summary (the last line of a log the runs shared) is never that line."""
    path = tmp_path / "run.db"
    summary = '{"run": "old", "status": "finished", "steps": 250}'
    EngineSupervisor([sys.executable, "-c", f"print({summary!r})"], path, "old").spawn().wait(30)
    app = RolloutLabApp(path, run_name="new", engine_cmd=[sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.engine is not None)
            await pilot.pause(1.0)  # four polls of the engine's log
            assert app.screen.sub_title == "waiting for the run to appear in the file…"
    finally:
        app.engine.kill()
        app.engine.wait(10)
    assert engine_log_path(path, "old").read_text().strip() == summary
    assert engine_log_path(path, "new").exists()


async def test_l_shows_the_log_of_the_watched_run(db):
    path, ids = db
    engine_log_path(path, "gigpo-demo").write_text("the other run's line\n")
    engine_log_path(path, "demo").write_text("demo's line\n")
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, EngineLogScreen)
                    and app.screen.query_one(Log).line_count > 0)
        assert list(app.screen.query_one(Log).lines) == ["demo's line"]


async def test_leaving_the_run_running_says_it_goes_on_and_how_to_attach_again(db, capsys):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, QuitScreen))
        await pilot.press("l")  # leave it running
        await until(pilot, lambda: not app.is_running)
    printed = " ".join(capsys.readouterr().err.split())
    assert f"run demo goes on; attach again with: rlab watch --db {path} demo" in printed, printed
    assert commands(path, ids["demo"]) == []
