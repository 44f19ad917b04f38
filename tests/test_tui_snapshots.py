"""Snapshot tests (pytest-textual-snapshot) of the four inspection screens on
the fixed small run file, at a fixed 120x40 terminal.

Update after an intended visual change with ``pytest --snapshot-update``
and look at the SVGs in tests/__snapshots__/test_tui_snapshots/.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from textual.widgets import DataTable

from fixtures.smalldb import build_small_db
from rlab.tui.app import RolloutLabApp
from rlab.tui.dashboard import DashboardScreen
from rlab.tui.runs import RunsScreen

SIZE = (120, 40)


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "run.db"
    return path, build_small_db(path)


def settled(*steps: str | Callable[[RolloutLabApp], bool]):
    """A run_before hook: wait for data and drawn plots, then take ``steps`` in order (a
    string: press that key; a callable: wait until it is true of the app), wait again.

    A fixed pause after a key is not enough on a loaded machine (CI): a screen fills its
    table from a worker, and a dashboard redraw that meets a poll holding the feed's lock
    waits for the next tick; so a step that needs such a state waits for it by name.
    """

    async def run_before(pilot) -> None:
        app = pilot.app

        async def wait(condition) -> None:
            deadline = time.monotonic() + 10
            while not condition():
                assert time.monotonic() < deadline, "the app did not settle"
                await pilot.pause(0.05)

        # a replayed watch (an imported run's alerts) catches up only after the first screen is painted
        await wait(lambda: app.view is not None and app.view.group is not None and app.feed is not None
                   and (app.feed.watch is None or app.feed.watched_step == app.feed.last_step))
        # caught up: a poll that brought nothing new, and every table and plot drawn
        # (on a loaded machine the first polls may split the file's history)
        await wait(lambda: _quiet(app.latest_poll) and not app.screen_stack[1]._dirty)
        for step in steps:
            if callable(step):
                await wait(lambda: step(app))
                continue
            await pilot.press(step)
            await pilot.pause(0.1)
            await app.workers.wait_for_complete()
        await pilot.pause(0.3)
        await app.workers.wait_for_complete()

    return run_before


def _quiet(poll) -> bool:
    """The poll brought no new step, event, group or rollout."""
    update = poll.update if poll is not None else None
    return update is not None and not (update.steps or update.events or update.groups or update.rollouts)


def test_dashboard(snap_compare, db):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    assert snap_compare(app, terminal_size=SIZE, run_before=settled())


def test_group_view(snap_compare, db):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    assert snap_compare(app, terminal_size=SIZE,
                        run_before=settled("left_square_bracket", "down", "g", "s"))


def test_trajectory_inspector(snap_compare, db):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["gigpo-demo"])
    assert snap_compare(app, terminal_size=SIZE, run_before=settled("t"))


def test_advantages_view(snap_compare, db):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["gigpo-demo"])
    assert snap_compare(app, terminal_size=SIZE, run_before=settled("a", "tab", "down", "enter"))


def test_dashboard_with_a_baseline(snap_compare, db):
    """r, p on the highlighted (latest) run gigpo-demo, back: its reward curves dotted."""
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    assert snap_compare(app, terminal_size=SIZE,
                        run_before=settled("r", _runs_listed, "p", "escape", _baseline_drawn))


def _runs_listed(app: RolloutLabApp) -> bool:
    """The runs screen is on top and its worker has filled the table (``p`` pins its cursor row)."""
    return isinstance(app.screen, RunsScreen) and app.screen.query_one(DataTable).row_count > 0


def _baseline_drawn(app: RolloutLabApp) -> bool:
    """The dashboard is back on top with the pinned baseline read and its plots redrawn."""
    screen = app.screen
    return isinstance(screen, DashboardScreen) and screen.baseline is not None and not screen._dirty


def test_metrics_view_filtered(snap_compare, db):
    """m, filter \"reward\", tab to the table (the input cursor blinks), down: reward plotted."""
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    assert snap_compare(app, terminal_size=SIZE, run_before=settled("m", *"reward", "tab", "down"))
