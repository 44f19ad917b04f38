"""Unit tests of the bounded step series and plot downsampling (tui/series.py)."""

import math

import pytest

from rlab.tui.series import StepSeries, downsample


def test_series_stays_bounded_and_keeps_newest():
    series = StepSeries(["reward"], capacity=8)
    for step in range(1000):
        series.append(step, {"reward": step / 1000})
    assert len(series) <= 8
    assert series.xy("reward")[0][-1] == 999  # the newest step is always plotted
    steps = list(series.steps)
    gaps = {b - a for a, b in zip(steps, steps[1:])}
    assert len(gaps) == 1  # evenly spaced after repeated halving
    assert steps[0] == 0


def test_series_skips_missing_values_and_replaces_upserted_step():
    series = StepSeries(["reward", "eval/pass_at_1"])
    series.append(0, {"reward": 0.1})
    series.append(1, {"reward": 0.2, "eval/pass_at_1": 0.5})
    series.append(1, {"reward": 0.3, "eval/pass_at_1": 0.5})
    assert series.xy("eval/pass_at_1") == ([1], [0.5])
    assert series.xy("reward") == ([0, 1], [0.1, 0.3])
    assert math.isnan(series.columns["eval/pass_at_1"][0])


def test_downsample_mean_min_max():
    xs = list(range(10))
    ys = [0, 9, 1, 8, 2, 7, 3, 6, 4, 5]
    assert downsample(xs, ys, 5, "max") == ([0.5, 2.5, 4.5, 6.5, 8.5], [9, 8, 7, 6, 5])
    assert downsample(xs, ys, 5, "min")[1] == [0, 1, 2, 3, 4]
    assert downsample(xs, ys, 2, "mean")[1] == [4.0, 5.0]
    assert downsample(xs, ys, 20) == (xs, ys)
    with pytest.raises(ValueError, match="how must be one of"):
        downsample(xs, ys, 3, "median")


def test_step_ticks_are_whole_steps():
    from rlab.tui.plots import step_ticks

    assert step_ticks(0, 7.2) == [0, 1, 3, 5, 7]
    assert step_ticks(3, 3) == [3]


def test_steps_per_second_from_arrivals(tmp_path):
    from fixtures.smalldb import build_small_db
    from rlab.store.reader import StoreReader
    from rlab.tui.feed import RunFeed

    path = tmp_path / "run.db"
    ids = build_small_db(path)
    with StoreReader(path) as reader:
        feed = RunFeed(reader, ids["demo"])
        feed.arrivals.extend([(100.0, 7), (102.0, 8), (104.0, 10)])
        assert feed.steps_per_second(now=105.0) == pytest.approx(0.75)  # 3 steps in 4 s
        assert feed.steps_per_second(window=2.0, now=105.0) is None  # one arrival in the window
        feed.arrivals.clear()
        feed.poll()  # the history read on attaching: a baseline, not a rate
        assert len(feed.arrivals) == 1 and feed.steps_per_second() is None


def test_a_run_the_engine_watched_still_feeds_the_recent_groups_table(tmp_path):
    """Without a replayed watch (the engine raised the alerts) the feed still reads the
    new steps' groups: the dashboard's recent-groups table was empty on every live run."""
    from fixtures.smalldb import build_small_db
    from rlab.store.reader import StoreReader
    from rlab.tui.feed import RunFeed

    path = tmp_path / "run.db"
    ids = build_small_db(path)
    with StoreReader(path) as reader:
        feed = RunFeed(reader, ids["demo"], replay=None)
        feed.poll()
        assert feed.watch is None and len(feed.groups) == 16
        assert {g["step"] for g in feed.groups} == set(range(8))


def test_the_first_poll_reads_the_newest_groups_and_a_replayed_watch_catches_up_at_the_next(tmp_path):
    """Issue 39: the first screen of a 3 GB run file waited seconds for the replayed watch's
    distinct-n over 20 steps of long completions; it now reads only what it shows."""
    from fixtures.smalldb import build_small_db
    from rlab.engine.alerts import AlertThresholds
    from rlab.store.reader import StoreReader
    from rlab.tui.feed import RunFeed

    path = tmp_path / "run.db"
    ids = build_small_db(path)
    with StoreReader(path) as reader:
        feed = RunFeed(reader, ids["demo"], replay=AlertThresholds(), keep_groups=4, backfill_steps=5)
        first = feed.poll(watch=False)  # what the app's first poll does
        assert [g["step"] for g in first.groups] == [6, 6, 7, 7]  # two steps fill the 4 rows
        assert feed.last_step == 7 and feed.watched_step == -1 and not feed.alerts
        second = feed.poll()
        assert [(row["step"], len(groups)) for row, groups in second.watched] == [
            (0, 0), (1, 0), (2, 0), (3, 2), (4, 2), (5, 2), (6, 2), (7, 2)]  # the newest 5 steps seeded
        assert feed.watched_step == 7 and not second.groups
        assert "perfect_share" in [a.kind for a in second.alerts]
