"""b / w put the cursor on the best / worst rollout of the group."""

from __future__ import annotations

from fixtures.smalldb import build_small_db
from rlab.tui.app import RolloutLabApp
from rlab.tui.view import Cursor
from test_tui_app import SIZE, loaded, until


async def test_b_and_w_jump_to_best_and_worst_rollout(tmp_path):
    path = tmp_path / "run.db"
    ids = build_small_db(path)
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        app.go_to(0)  # the newest step's groups are all-perfect
        await until(pilot, lambda: app.view.cursor.step == 0 and app.view.group["trajectories"])
        rewards = [t["reward"] for t in app.view.group["trajectories"]]
        assert len(set(rewards)) > 1, "the fixture group needs distinct rewards"
        await pilot.press("w")
        await until(pilot, lambda: app.view.trajectory is not None
                    and app.view.trajectory["reward"] == min(rewards))
        assert app.cursor.traj_pos == rewards.index(min(rewards))
        await pilot.press("b")
        await until(pilot, lambda: app.view.trajectory["reward"] == max(rewards))
        assert app.cursor.traj_pos == rewards.index(max(rewards))


async def test_end_returns_to_the_newest_step_and_the_header_says_where_the_cursor_is(tmp_path):
    """Issue 47, 4: after enter on an alert or `[`, no key went back to following the run (a
    newcomer pressed `]` 450 times); the header did not say the cursor had left the newest step.
    And a fast run's poll moved the cursor to the newest step while the previous step's view was
    still loading; that stale view put the cursor back a step ("at step 78 of 80: end follows"
    with no key pressed). And `end` did nothing while a table had the focus."""
    path = tmp_path / "run.db"
    ids = build_small_db(path)
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        newest = app.feed.last_step
        await until(pilot, lambda: "(following)" in app.screen.sub_title)
        await pilot.press("left_square_bracket", "left_square_bracket")
        await until(pilot, lambda: f"(at step {newest - 2} of {newest}: end follows)" in app.screen.sub_title)
        await pilot.press("end")
        await until(pilot, lambda: app.cursor.step == newest and "(following)" in app.screen.sub_title)
        app._show_view(app._views.load(app.run_id, Cursor(newest - 1, 0, 0)))  # a load the cursor moved past
        await pilot.pause()
        assert app.cursor.step == newest and app.view.cursor.step == newest
        assert "(following)" in app.screen.sub_title
        # a newcomer tabbed to the alerts panel: `end` went to the focused table (its last row)
        await pilot.press("left_square_bracket")
        await until(pilot, lambda: app.cursor.step == newest - 1)
        app.screen.query_one("#alerts").focus()
        await pilot.press("end")
        await until(pilot, lambda: app.cursor.step == newest and "(following)" in app.screen.sub_title)

