"""The dashboard: live plots, recent groups, latest rollouts, alerts, the cursor line."""

from __future__ import annotations

import time
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal
from textual.widgets import DataTable, Footer, Header, Static

from rlab.store.records import DEFAULT_SUCCESS_THRESHOLD
from rlab.tui.baseline import Baseline, load_baseline
from rlab.engine.paths import engine_log_path
from rlab.tui.engine_log import EngineLogScreen
from rlab.tui.feed import FeedUpdate, Poll, RunFeed
from rlab.engine.cli.formatting import clip, fmt
from rlab.tui.metrics import MetricsScreen
from rlab.tui.plots import MetricPlot, Trace
from rlab.tui.reward_bars import reward_bars
from rlab.tui.view import NavScreen, View

REDRAW_SECONDS = 0.5
"""Plots and tables redraw at most this often (seconds): twice a second."""

PARENT_REFRESH_S = 5.0
"""How often a fork's running parent is read again for the plots (seconds)."""

GROUP_ROWS = 24
ROLLOUT_ROWS = 20
ALERT_ROWS = 50
ALERT_WIDTH = 38
"""Width of the alert column (cells); longer messages wrap."""
"""Rows kept in the dashboard's tables (a few more than fit on screen: each
row is measured on every redraw)."""


def run_line(run: dict | None, step: int | None, steps_per_s: float | None,
             engine_line: str | None = None, file_size: str = "", pass_at_1: float | None = None,
             reward: float | None = None, cursor: int | None = None,
             endpoint: dict[str, float] | None = None) -> str:
    """The header's sub-title: scenario (unless the run's name starts with it), step (and where the cursor is: ``following``
    the newest step, or ``at step N of M``, which ``end`` leaves), STATUS, the latest held-out
    pass@1 with what counts as solved (the run's success function, or "=
    total reward >= 1" when it declared none) and the held-out mean reward
    beside it, steps/s, the run file's size and growth; before the run
    exists, the engine's latest output line (e.g. the tiny model's build).
    Steps/s is the last half minute's, so it is shown only while the run is
    running: a paused or finished one moves at none (nor does its file grow:
    :meth:`_set_header` asks ``FileGrowth`` for the size alone then). A run
    of a user's agent adds its endpoint's last step (:func:`endpoint_part`)."""
    if run is None:
        return f"starting the engine: {engine_line}" if engine_line else "waiting for the run to appear in the file…"
    running = run["status"] == "running"
    rate = f"{steps_per_s:.2f} steps/s" if steps_per_s and running else "- steps/s"
    size = f" · file {file_size}" if file_size else ""
    held_out = ""
    if pass_at_1 is not None:
        held_out = f" · pass@1 {pass_at_1:.3f} ({success_label(run)})"
        held_out += f" · reward {reward:.3f}" if reward is not None else ""
    where = "" if cursor is None or step is None else (
        " (following)" if cursor == step else f" (at step {cursor} of {step}: end follows)")
    # the title left of it holds the run's name, which names the scenario when the lab chose it
    scenario = "" if str(run.get("name", "")).startswith(run["scenario"]) else f"{run['scenario']} · "
    door = endpoint_part(endpoint) if endpoint else ""
    return f"{scenario}step {fmt(step, 'd')}{where} · {run['status'].upper()}{held_out}{door} · {rate}{size}"


#: The endpoint's step metrics the header shows (engine.agent.play).
ENDPOINT_METRICS = ("endpoint/requests", "endpoint/batch_width", "endpoint/queue_wait_s", "endpoint/tokens_per_s")


def endpoint_part(endpoint: dict[str, float]) -> str:
    """`` · endpoint 64 req, width 5.2, wait 0.03 s, 410 tok/s``: the last step's requests, mean
    batch width, mean queue wait and tokens/s through the agent endpoint."""
    requests, width, wait, rate = (endpoint.get(name) for name in ENDPOINT_METRICS)
    return f" · endpoint {fmt(requests, '.0f')} req, width {fmt(width, '.1f')}, wait {fmt(wait, '.2f')} s, " \
           f"{fmt(rate, '.0f')} tok/s"


def success_label(run: dict) -> str:
    """What the run's pass@1 counts, from its stored config: ``correct >= 1``, or
    ``= total reward >= 1`` for a run that declared no success function."""
    config = run.get("config") or {}
    threshold = config.get("success_threshold", DEFAULT_SUCCESS_THRESHOLD)
    function = config.get("success")
    return f"{function} >= {threshold:g}" if function else f"= total reward >= {threshold:g}"


def cursor_line(view: View | None) -> str:
    """One line naming what the cursor is on."""
    if view is None or view.group is None:
        return "cursor: -"
    c, group = view.cursor, view.group
    trajs = group["trajectories"]
    traj = trajs[c.traj_pos] if trajs else {}
    return (f"cursor: step {c.step} · group {c.group_pos + 1}/{len(view.groups)} "
            f"(#{group['id']}) · trajectory {c.traj_pos + 1}/{len(trajs)} · "
            f"reward {fmt(traj.get('reward'))} · A {fmt(traj.get('advantage'), '+.2f')} · "
            f"{clip(traj.get('completion'), 60)}")


def table(id: str, title: str, *columns: str) -> DataTable:
    """A row-cursor DataTable with its columns and border title."""
    widget = DataTable(id=id, cursor_type="row", zebra_stripes=True)
    widget.add_columns(*columns)
    widget.border_title = title
    return widget


class DashboardScreen(NavScreen):
    """The live view of a run (issue 6, part 1); the app's base screen."""

    BINDINGS = [Binding("escape", "unfocus", "Unfocus", show=False),
                Binding("m", "metrics", "Metrics"),
                Binding("l", "engine_log", "Log")]

    def action_unfocus(self) -> None:
        """Escape: leave a focused table so the arrows move the cursor again."""
        self.set_focus(None)

    def compose(self) -> ComposeResult:
        yield Header()
        with Grid(id="plots"):
            yield MetricPlot("reward (mean, min/max) · success · eval/pass@1", [
                Trace("reward_min", "min", "gray", how="min"),
                Trace("reward_max", "max", "gray", how="max"),
                Trace("reward", "reward", "cyan"),
                Trace("success_rate", "success", "green"),
                Trace("eval/pass_at_1", "pass@1", "green+", scatter=True),
            ], id="plot-reward")
            yield MetricPlot("reward_std · frac_reward_zero_std", [
                Trace("reward_std", "reward_std", "cyan"),
                Trace("frac_reward_zero_std", "frac_zero_std", "red"),
            ], id="plot-std")
            yield MetricPlot("kl · clip_ratio", [
                Trace("kl", "kl", "yellow"),
                Trace("clip_ratio", "clip_ratio", "magenta", yside="right"),
            ], id="plot-kl")
            yield MetricPlot("completions/mean_length · entropy", [
                Trace("completions/mean_length", "length", "cyan"),
                Trace("entropy", "entropy", "green", yside="right"),
            ], id="plot-length")
        with Horizontal(id="middle"):
            yield table("groups", "recent groups", "step", "group", "prompt", "rewards", "best",
                        "worst")
            bars = Static(id="reward-bars")
            bars.border_title = "rewards"
            yield bars
            alerts = table("alerts", "alerts (enter opens the groups)")
            alerts.add_column("step", width=5)
            alerts.add_column("alert", width=ALERT_WIDTH)
            yield alerts
        yield table("rollouts", "latest rollouts", "step", "prompt", "completion", "reward")
        yield Static("cursor: -", id="cursor-line")
        yield Footer(compact=True)

    def __init__(self) -> None:
        super().__init__()
        self._dirty: set[str] = set()
        self._drawn = False
        self._feed: RunFeed | None = None
        self._shown: dict[str, dict[str, Any]] = {}  # table id -> the rows it shows, by row key
        self.baseline: Baseline | None = None
        self._pinned = False  # the user pinned (or unpinned) a baseline
        self._parent_read: float | None = None  # when a fork's parent was last read (time.monotonic)

    @property
    def _plots_dirty(self) -> bool:
        return "plots" in self._dirty

    def on_mount(self) -> None:
        self.set_interval(REDRAW_SECONDS, self._redraw)
        self._set_header()
        if self.app.feed is not None:  # polled before this screen was mounted
            self._note_update(None, self.app.feed)
        self.watch(self.app, "latest_poll", self._on_poll, init=False)
        self.watch(self.app, "run_id", self._forget_run, init=False)
        self.watch(self.app, "engine_status", self._set_header, init=False)

    def on_screen_resume(self) -> None:
        self._redraw()

    def _on_poll(self, poll: Poll | None) -> None:
        """The app polled the run (its ``latest_poll``): note what the poll brought."""
        if poll is not None:
            self._note_update(poll.update, poll.feed)

    def _note_update(self, update: FeedUpdate | None, feed: RunFeed) -> None:
        """Note what a poll brought (UI thread); ``None`` means everything.

        Only the header is updated at once; plots and tables are redrawn by
        :meth:`_redraw`, at most twice a second and only while this screen is
        the one on top (rebuilding tables costs the UI thread milliseconds).
        """
        self._feed = feed
        self._set_header()
        self._follow_parent(feed.run)
        if update is None or update.steps or update.events:
            self._dirty.add("plots")
        if update is None or update.groups:
            self._dirty.add("groups")
        if update is None or update.rollouts:
            self._dirty.add("rollouts")
        if update is None or update.alerts:
            self._dirty.add("alerts")
        if not self._drawn:  # the first data: show it now, not at the next tick
            self._redraw()

    def _forget_run(self) -> None:
        """The app watches another run (its ``run_id``): forget the previous one."""
        self._feed = None
        if not self._pinned:
            self.baseline, self._parent_read = None, None
        self._dirty.clear()
        self._drawn = False
        self._shown.clear()
        for table in self.query(DataTable):
            table.clear()
        self._set_header()

    def show_view(self, view: View) -> None:
        self._set_header()  # where the cursor is: "(following)" or "at step N of M"
        self.query_one("#cursor-line", Static).update(cursor_line(view))
        bars = self.query_one("#reward-bars", Static)
        bars.border_title = f"rewards · step {view.cursor.step}"
        bars.update(reward_bars([t["reward"] for g in view.groups for t in g["trajectories"]]))

    def action_metrics(self) -> None:
        """``m``: every metric of the run, filtered by name (tui.metrics)."""
        if self.app.run_id is not None:
            self.app.push_screen(MetricsScreen(self.app.run_id, self.baseline))

    def action_engine_log(self) -> None:
        """``l``: the watched run's engine log's tail, followed live."""
        name = (self.app.run_row or {}).get("name") or self.app.run_name
        if name is None:
            self.app.notify("no run yet: its engine log is named after it", severity="warning")
            return
        self.app.push_screen(EngineLogScreen(engine_log_path(self.app.db_path, name)))

    def pin_baseline(self, run_id: int | None) -> None:
        """Overlay run ``run_id``'s curves on the plots (None, or the pinned run again: unpin)."""
        self._pinned = True  # the user's choice: no more following a fork's parent
        if run_id is None or (self.baseline is not None and self.baseline.run_id == run_id):
            self._show_baseline(None)
        else:
            self.app.read_in_worker(lambda reader: load_baseline(reader, run_id), self._show_baseline)

    def _show_baseline(self, baseline: Baseline | None) -> None:
        self.baseline = baseline
        self.app.notify(f"baseline: {baseline.name} (dotted)" if baseline else "baseline unpinned", timeout=3)
        self._dirty.add("plots")
        self._redraw()

    def _follow_parent(self, run: dict | None) -> None:
        """A fork's parent is its baseline (unless one is pinned): read it, and again
        every :data:`PARENT_REFRESH_S` while it still runs, so both branches grow on the plots."""
        parent = (run or {}).get("parent_id")
        if self._pinned or parent is None or self._parent_read is not None and (
                time.monotonic() - self._parent_read < PARENT_REFRESH_S
                or self.baseline is not None and not self.baseline.live):
            return
        self._parent_read = time.monotonic()
        self.app.read_in_worker(lambda reader: load_baseline(reader, parent, "parent"), self._show_parent)

    def _show_parent(self, baseline: Baseline | None) -> None:
        if self._pinned:
            return
        self.baseline = baseline
        self._dirty.add("plots")

    def _set_header(self) -> None:
        app = self.app
        run = app.run_row
        self.title = run["name"] if run else (app.run_name or "Rollout Lab")
        step = self._feed.last_step if self._feed and self._feed.last_step >= 0 else None
        evals = self._feed.series.xy("eval/pass_at_1")[1] if self._feed else []
        rewards = self._feed.series.xy("eval/reward")[1] if self._feed else []
        running = run is not None and run["status"] == "running"
        last = self._feed.latest if self._feed else {}
        endpoint = {name: last[name] for name in ENDPOINT_METRICS if isinstance(last.get(name), (int, float))}
        self.sub_title = run_line(run, step, app.steps_per_second, app.engine_line,
                                  app.file_growth.describe(with_rate=running), evals[-1] if evals else None,
                                  rewards[-1] if rewards else None, app.cursor.step, endpoint)
        if run is None and app.engine_failure:  # the engine died: say so, never "waiting"
            self.sub_title = app.engine_failure[0]
            line = self.query_one("#cursor-line", Static)
            line.styles.height = "auto"
            line.update(Text("\n".join(app.engine_failure)))  # log text, not markup

    def _redraw(self) -> None:
        """Draw what changed since the last tick, if this screen is showing."""
        feed = self._feed
        if not self._dirty or feed is None or not self.is_current:
            return
        if not feed.lock.acquire(blocking=False):
            return  # the poll worker is folding new rows in: draw next tick
        try:
            dirty, self._dirty = self._dirty, set()
            self._drawn = True
            if "plots" in dirty:
                marks = list(feed.marks)
                base = self.baseline.series if self.baseline else None
                for plot in self.query(MetricPlot):
                    plot.draw(feed.series, marks, base, self.baseline.label if self.baseline else "base")
            if "groups" in dirty:
                self._fill_groups(feed)
            if "rollouts" in dirty:
                self._fill_rollouts(feed)
            if "alerts" in dirty:
                self._fill_alerts(feed)
        finally:
            feed.lock.release()

    def _fill_groups(self, feed: RunFeed) -> None:
        rows = {str(g["id"]): g for g in list(feed.groups)[-GROUP_ROWS:][::-1]}
        table = self._refill("groups", rows)
        for key, g in rows.items():
            rewards = " ".join(fmt(r, ".3g") for r in g["rewards"])  # 0.25 stays 0.25
            table.add_row(g["step"], g["idx"], clip(g["prompt"], 24), clip(rewards, 32),
                          clip(g["best"], 14), clip(g["worst"], 14), key=key)

    def _fill_rollouts(self, feed: RunFeed) -> None:
        rows = {str(ro["id"]): ro for ro in list(feed.rollouts)[-ROLLOUT_ROWS:][::-1]}
        table = self._refill("rollouts", rows)
        for key, ro in rows.items():
            table.add_row(ro["step"], clip(ro["prompt"], 40), clip(ro["completion"], 50),
                          fmt(ro["reward"]), key=key)

    def _fill_alerts(self, feed: RunFeed) -> None:
        rows = {str(i): alert for i, alert in list(enumerate(feed.alerts))[-ALERT_ROWS:][::-1]}
        table = self._refill("alerts", rows)
        for key, alert in rows.items():
            table.add_row(alert.step, Text(f"{alert.kind}: {alert.message}"), key=key,
                          height=None)  # None: as many lines as the wrapped message needs

    def _refill(self, table_id: str, rows: dict[str, Any]) -> DataTable:
        """Empty a table that will show ``rows`` (row key -> feed row), and keep
        them for Enter: by then a poll may have dropped them from the feed."""
        self._shown[table_id] = rows
        table = self.query_one(f"#{table_id}", DataTable)
        table.clear()
        return table

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a group, rollout or alert: open the group view on it."""
        row = self._shown.get(event.data_table.id or "", {}).get(event.row_key.value or "")
        if row is None:  # the table was refilled between the key press and this message
            return
        if event.data_table.id == "alerts":
            self.app.go_to(row.step, group_id=row.group_ids[0] if row.group_ids else None)
        elif event.data_table.id == "groups":
            self.app.go_to(row["step"], group_id=row["id"])
        else:
            self.app.go_to(row["step"], group_id=row["group_id"], traj_id=row["id"])
        self.app.action_open("group")
