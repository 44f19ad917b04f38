"""The dashboard features TRL / verifiers users expect: reward-distribution
bars per step, a pinned baseline run overlaid on the plots, a metric filter
(``m``) and the engine log's tail (``l``). Pilot tests on the fixed small run
file, plus the pure helpers."""

from __future__ import annotations

import math

import pytest
from textual.widgets import DataTable, Input, Log, Static

from fixtures.smalldb import build_small_db
from rlab.store.reader import StoreReader
from rlab.tui.app import RolloutLabApp
from rlab.tui.dashboard import DashboardScreen, run_line
from rlab.tui.dialogs import HelpScreen
from rlab.engine.paths import engine_log_path
from rlab.tui.engine_log import EngineLogScreen, LogTail
from rlab.tui.metrics import MetricsScreen, matches
from rlab.tui.plots import MetricPlot
from rlab.tui.reward_bars import reward_bars, reward_bins
from test_tui_app import SIZE, db, loaded, until  # noqa: F401 - db is a fixture


def test_reward_bins_give_each_of_few_values_its_own_bar():
    assert reward_bins([1.0, 0.0, 1.0, None, math.nan, 1.0]) == [("0.00", 1), ("1.00", 3)]
    assert reward_bins([]) == [] and str(reward_bars([None])) == "no rewards"


def test_reward_bins_cut_many_values_into_equal_bins():
    rewards = [i / 100 for i in range(100)]
    bins = reward_bins(rewards, bins=4)
    assert [count for _, count in bins] == [25, 25, 25, 25]
    assert bins[0][0] == ">=0.00" and bins[-1][0] == ">=0.74"
    with pytest.raises(ValueError, match="bins must be >= 1"):
        reward_bins(rewards, bins=0)


def test_reward_bars_scale_the_longest_bar_to_the_width():
    lines = str(reward_bars([0.0, 1.0, 1.0, 1.0, 1.0], width=8)).splitlines()
    assert lines == ["0.00 ██ 1", "1.00 ████████ 4"]


def test_log_tail_reads_only_complete_new_lines(tmp_path):
    path = tmp_path / "x.log"
    tail = LogTail(path, tail_bytes=10)
    assert tail.read() is None  # no file yet
    path.write_text("old line that is cut\nlast\n")
    assert tail.read() == ["last"]  # only the last 10 bytes on opening
    with path.open("a") as handle:
        handle.write("step 1\rstep 2\rpart")
    assert tail.read() == ["step 1", "step 2"]
    with path.open("a") as handle:
        handle.write("ial\n")
    assert tail.read() == ["partial"]
    path.write_text("new\n")  # truncated (a new engine): read from the start
    assert tail.read() == ["new"]


def test_metric_filter_words_all_match_in_any_case():
    assert matches("rewards/correct/mean", "REWARDS mean")
    assert not matches("rewards/correct/mean", "rewards std")
    assert matches("kl", "")


def _step_rewards(path, run_id, step) -> list[float]:
    with StoreReader(path) as reader:
        return [t["reward"] for g in reader.groups_of_step(run_id, step) for t in g["trajectories"]]


async def test_reward_bars_follow_the_cursor_step(db):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        bars = app.screen.query_one("#reward-bars", Static)
        step = app.cursor.step
        assert bars.border_title == f"rewards · step {step}"
        assert str(bars.render()) == str(reward_bars(_step_rewards(path, ids["demo"], step)))
        await pilot.press("left_square_bracket")
        await until(pilot, lambda: bars.border_title == f"rewards · step {step - 1}")
        assert str(bars.render()) == str(reward_bars(_step_rewards(path, ids["demo"], step - 1)))


async def test_p_in_the_runs_list_pins_a_baseline_drawn_on_the_plots(db):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        dashboard = app.screen
        assert isinstance(dashboard, DashboardScreen)
        await pilot.press("r")
        await until(pilot, lambda: app.screen.query_one(DataTable).row_count == 2)
        table = app.screen.query_one(DataTable)
        table.move_cursor(row=[r["id"] for r in app.screen._runs].index(ids["gigpo-demo"]))
        await pilot.press("p")
        await until(pilot, lambda: dashboard.baseline is not None)
        assert dashboard.baseline.name == "gigpo-demo"
        assert dashboard.baseline.series.xy("reward") == ([0, 1, 2], [1 / 3] * 3)
        await pilot.press("escape")
        plot = dashboard.query_one("#plot-reward", MetricPlot)
        await until(pilot, lambda: plot._last is not None and plot._last[2] is dashboard.baseline.series)
        await pilot.press("r")
        await until(pilot, lambda: app.screen.query_one(DataTable).row_count == 2)
        app.screen.query_one(DataTable).move_cursor(
            row=[r["id"] for r in app.screen._runs].index(ids["gigpo-demo"]))
        await pilot.press("p")  # the pinned run again: unpin
        await until(pilot, lambda: dashboard.baseline is None)
        await pilot.press("escape")
        await until(pilot, lambda: plot._last[2] is None)


def test_a_baseline_adds_dotted_traces_for_the_line_metrics(db):
    from rlab.tui.baseline import metric_series
    from rlab.tui.plots import Trace

    path, ids = db
    with StoreReader(path) as reader:
        base = metric_series(reader.step_metrics(ids["gigpo-demo"]))
    plot = MetricPlot("t", [Trace("reward_min", "min", "gray", how="min"), Trace("reward", "reward", "cyan"),
                            Trace("kl", "kl", "yellow")])
    drawn: list[tuple] = []
    plot.plt.plot = lambda xs, ys, **kw: drawn.append((list(xs), list(ys), kw["label"], kw["marker"]))
    assert plot._draw_baseline(base, width=40) == [0, 2]
    assert drawn == [([0, 1, 2], [1 / 3] * 3, "reward · base", "dot")]  # no band edge; kl not stored


async def test_m_filters_every_metric_and_plots_the_highlighted_one(db):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("m")
        await until(pilot, lambda: isinstance(app.screen, MetricsScreen) and app.screen.shown)
        screen = app.screen
        with StoreReader(path) as reader:
            stored = sorted({k for row in reader.step_metrics(ids["demo"]) for k in row if k != "step"})
        assert screen.shown == stored
        await pilot.press(*"reward")
        await until(pilot, lambda: screen.query_one(Input).value == "reward")
        assert screen.shown == [m for m in stored if "reward" in m] and "kl" not in screen.shown
        table = screen.query_one(DataTable)
        assert table.row_count == len(screen.shown)
        plot = screen.query_one(MetricPlot)
        assert plot.title == screen.shown[0]
        await pilot.press("space", *"max")
        await until(pilot, lambda: screen.shown == ["reward_max"])
        last = str(table.get_row_at(0)[1])
        assert float(last) == pytest.approx(screen.series.xy("reward_max")[1][-1], rel=1e-3)
        await pilot.press(*"zzz")
        await until(pilot, lambda: screen.shown == [])
        assert plot.title == "no metric matches the filter"


async def test_l_shows_the_engine_log_tail_and_follows_it(db):
    path, ids = db
    log_path = engine_log_path(path, "demo")
    log_path.write_text("loading the tiny policy\nstep     1  reward 0.250\n")
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, EngineLogScreen))
        log = app.screen.query_one(Log)
        await until(pilot, lambda: log.line_count == 2)
        assert list(log.lines) == ["loading the tiny policy", "step     1  reward 0.250"]
        with log_path.open("a") as handle:
            handle.write("rlab: error: the judge failed\n")
        await until(pilot, lambda: log.line_count == 3)
        assert log.lines[-1] == "rlab: error: the judge failed"
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, DashboardScreen))


async def test_l_without_an_engine_log_says_where_it_would_be(db):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("l")
        await until(pilot, lambda: isinstance(app.screen, EngineLogScreen)
                    and app.screen.query_one(Log).line_count == 1)
        assert f"no engine log at {engine_log_path(path, 'demo')}" in app.screen.query_one(Log).lines[0]


def test_the_header_names_what_pass_at_1_counts_and_shows_the_held_out_reward_beside_it():
    run = {"scenario": "task", "status": "running",
           "config": {"success": "exact_reverse", "success_threshold": 1.0}}
    line = run_line(run, 40, 2.0, pass_at_1=0.25, reward=1.18)
    assert "pass@1 0.250 (exact_reverse >= 1) · reward 1.180" in line
    declared_none = {**run, "config": {"success": None}}
    assert "pass@1 0.250 (= total reward >= 1)" in run_line(declared_none, 40, 2.0, pass_at_1=0.25)



def test_the_header_shows_rates_only_while_the_run_runs():
    """Issue 47, 4: a paused run's header kept the steps/s of its last half minute."""
    run = {"scenario": "task", "status": "running", "config": {}}
    assert run_line(run, 40, 2.0, file_size="4.0 KB").endswith("2.00 steps/s · file 4.0 KB")
    for status in ("paused", "finished", "failed"):
        assert run_line({**run, "status": status}, 40, 2.0, file_size="4.0 KB").endswith("- steps/s · file 4.0 KB")
    # a newcomer's 160 columns cut the file size off: a name the lab chose already says the scenario
    assert run_line({**run, "name": "mine"}, 40, 2.0).startswith("task · step 40")
    assert run_line({**run, "name": "task-20261129-021230-a6a7"}, 40, 2.0).startswith("step 40")


# ---- what a newcomer met on the dashboard (issue 33) ---------------------------------------------


async def test_help_scrolls_to_its_last_keys_at_160_by_48(db):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=(160, 48)) as pilot:
        await loaded(pilot)
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        box = app.screen.query_one("#help-box")
        await until(pilot, lambda: box.max_scroll_y > 0)  # the list is longer than the box
        await pilot.press("end")
        await until(pilot, lambda: box.scroll_y == box.max_scroll_y)


def test_group_rewards_keep_their_second_decimal():
    from rlab.engine.cli.formatting import fmt

    assert " ".join(fmt(r, ".3g") for r in [0.25, 1.0, 0.125, 1.5]) == "0.25 1 0.125 1.5"


def test_an_imported_run_without_token_counts_has_no_lengths_to_plot():
    from rlab.store.records import GroupRecord, TrajectoryRecord
    from rlab.store.stepstats import step_stats

    unknown = [TrajectoryRecord(index=i, messages=[], completion="x", reward=1.0, components={}, details={},
                                advantage=0.0) for i in range(2)]
    stats = step_stats([GroupRecord(index=0, example_id=0, prompt="p", trajectories=unknown)])
    assert "completions/mean_length" not in stats and "num_tokens" not in stats  # n/a, not 0


def test_the_header_shows_the_final_eval_written_into_a_step_row_it_had_read():
    """rlab runs said 0.932 while the header kept 0.944: the final eval lands in the last step's row."""
    import tempfile
    from pathlib import Path

    from rlab.store.writer import StoreWriter
    from rlab.tui.feed import RunFeed

    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "f.db"
        with StoreWriter(db) as writer:
            run_id = writer.start_run("f", "arithmetic", {}, {})
            writer.write_step(run_id, 0, {"eval/pass_at_1": 0.4})
            writer.write_step(run_id, 25, {"reward": 0.9, "eval/pass_at_1": 0.944})
            writer.write_step(run_id, 37, {"reward": 0.9})
            feed = RunFeed(StoreReader(db), run_id)
            feed.poll()
            writer.write_step(run_id, 37, {"eval/pass_at_1": 0.932})  # the final eval, after the feed read 37
            writer.set_status(run_id, "finished")
        feed.poll()
        assert feed.series.xy("eval/pass_at_1")[1][-1] == 0.932


def test_compare_lists_at_most_n_flips_and_says_how_many_more():
    from rich.console import Console

    from rlab.engine.cli.reports import comparison_report

    flips = [{"example_id": f"ex-{i}", "direction": "gained", "trajectory_a": i, "reward_a": 0.0,
              "trajectory_b": 100 + i, "reward_b": 1.0} for i in range(216)]
    result = {"run_a": {"name": "A"}, "run_b": {"name": "B"}, "comparable": True, "differences": [],
              "forced": False, "reason": None,
              "paired": {"n": 500, "pass_at_1_a": 0.4, "pass_at_1_b": 0.6, "difference": 0.2, "mcnemar_p": 0.001,
                         "gained": 216, "lost": 0, "unpaired": 0, "interval": {"low": 0.1, "high": 0.3},
                         "flips": flips}}
    console = Console(width=140, record=True)
    console.print(comparison_report(result))
    text = console.export_text()
    assert "ex-19" in text and "ex-20" not in text and "196 more flipped examples" in text


def test_inspect_spreads_tied_lowest_rewards_over_groups(tmp_path):
    from rlab.engine.evaluation.inspect import worst_trajectories
    from rlab.store.records import GroupRecord, TrajectoryRecord
    from rlab.store.writer import StoreWriter

    with StoreWriter(tmp_path / "i.db") as writer:
        run_id = writer.start_run("i", "arithmetic", {}, {})
        for g in range(6):
            trajectories = [TrajectoryRecord(index=j, messages=[], completion=f"{g}-{j}", reward=0.0,
                                             components={}, details={}, advantage=0.0) for j in range(8)]
            writer.write_group(run_id, 1, GroupRecord(index=g, example_id=f"ex-{g}", prompt="p",
                                                      trajectories=trajectories))
    with StoreReader(tmp_path / "i.db") as reader:
        _, rows = worst_trajectories(reader, "i", top_k=5)
    assert sorted(r["example_id"] for r in rows) == ["ex-0", "ex-1", "ex-2", "ex-3", "ex-4"]


def test_inspect_of_a_training_run_shows_the_latest_steps_failures_first(tmp_path):
    """Failures tie at reward 0 over every step of a training run: the latest
    steps' come first (what the policy does now), not step 1's by id."""
    from rlab.engine.evaluation.inspect import worst_trajectories
    from rlab.store.records import GroupRecord, TrajectoryRecord
    from rlab.store.writer import StoreWriter

    with StoreWriter(tmp_path / "t.db") as writer:
        run_id = writer.start_run("t", "arithmetic", {}, {})
        for step in range(1, 5):
            for g in range(2):
                trajectories = [TrajectoryRecord(index=j, messages=[], completion=f"{step}-{g}-{j}",
                                                 reward=float(j == 3), components={}, details={}, advantage=0.0)
                                for j in range(4)]
                writer.write_group(run_id, step, GroupRecord(index=g, example_id=f"ex-{step}-{g}", prompt="p",
                                                             trajectories=trajectories))
    with StoreReader(tmp_path / "t.db") as reader:
        _, rows = worst_trajectories(reader, "t", top_k=4, only_fails=True)
    assert [(r["step"], r["example_id"]) for r in rows] == [(4, "ex-4-0"), (4, "ex-4-1"), (3, "ex-3-0"),
                                                            (3, "ex-3-1")]
