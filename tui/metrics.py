"""Every step metric of the run, filtered by name (``m`` on the dashboard).

The dashboard plots a fixed set of metrics; this view lists all of them
(``rewards/{name}/mean``, ``completions/clipped_ratio``, ``num_tokens``,
``gigpo/...``: whatever the engine or an importer stored), keeps those whose
name contains the filter text (case-insensitive; several words separated by
spaces must all match), and plots the highlighted one, with the pinned
baseline run's curve when there is one (:mod:`tui.baseline`).
"""

from __future__ import annotations

import math
import time

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Input

from rlab.tui.baseline import Baseline, metric_series
from rlab.tui.feed import Poll
from rlab.engine.cli.formatting import fmt
from rlab.tui.plots import MetricPlot, Trace
from rlab.tui.series import StepSeries


RELOAD_SECONDS = 2.0
"""While the run goes on, its metrics are read again at most this often
(seconds): each read decodes every step's metrics JSON."""


def matches(name: str, text: str) -> bool:
    """Whether metric ``name`` passes the filter ``text`` (every word a substring, any case)."""
    return all(word in name.lower() for word in text.lower().split())


def summary(series: StepSeries, name: str) -> tuple[float | None, float | None, float | None]:
    """(last, min, max) of metric ``name`` in ``series``; Nones without values."""
    values = [v for v in series.xy(name)[1] if not math.isnan(v)] if name in series.columns else []
    return (values[-1], min(values), max(values)) if values else (None, None, None)


class MetricsScreen(Screen):
    """A filter box, the matching metrics (last, min, max, baseline's last)
    and a plot of the highlighted one; ``tab`` moves from the filter to the
    table (arrows pick the plotted metric), ``escape`` goes back."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back")]
    AUTO_FOCUS = "#metric-filter"

    def __init__(self, run_id: int, baseline: Baseline | None = None) -> None:
        super().__init__()
        self.run_id = run_id
        self.baseline = baseline
        self.series = StepSeries([])
        self.shown: list[str] = []
        self._read_at = 0.0

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(placeholder="filter metrics by name, e.g. rewards/ or length", id="metric-filter")
        with Horizontal(id="metric-body"):
            yield DataTable(id="metric-table", cursor_type="row", zebra_stripes=True)
            yield MetricPlot("", [], id="metric-plot")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.title = "metrics"
        self.sub_title = f"baseline: {self.baseline.name}" if self.baseline else ""
        self.query_one(DataTable).add_columns("metric", "last", "min", "max", "baseline")
        self.reload()
        self.watch(self.app, "latest_poll", self._on_poll, init=False)

    def reload(self) -> None:
        """Read the run's step metrics again (off the UI thread: ``app.read_in_worker``)."""
        run_id = self.run_id
        self._read_at = time.monotonic()
        self.app.read_in_worker(lambda reader: metric_series(reader.step_metrics(run_id)), self._loaded)

    def _on_poll(self, poll: Poll | None) -> None:
        """The app polled the run (its ``latest_poll``): when new steps
        arrived, read again (at most every ``RELOAD_SECONDS``)."""
        if poll is not None and poll.update.steps and time.monotonic() - self._read_at >= RELOAD_SECONDS:
            self.reload()

    def _loaded(self, series: StepSeries) -> None:
        self.series = series
        self._fill()

    def on_input_changed(self, event: Input.Changed) -> None:
        self._fill()

    def _fill(self) -> None:
        text = self.query_one(Input).value
        table = self.query_one(DataTable)
        row = table.cursor_row
        table.clear()
        self.shown = [name for name in self.series.metrics if matches(name, text)]
        for name in self.shown:
            base = summary(self.baseline.series, name)[0] if self.baseline else None
            table.add_row(name, *(fmt(v, ".4g") for v in summary(self.series, name)), fmt(base, ".4g"),
                          key=name)
        if self.shown:
            table.move_cursor(row=min(row, len(self.shown) - 1))
        self._plot()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._plot()

    def _plot(self) -> None:
        plot = self.query_one(MetricPlot)
        table = self.query_one(DataTable)
        if not self.shown:
            plot.title, plot.traces = "no metric matches the filter", []
        else:
            name = self.shown[min(table.cursor_row, len(self.shown) - 1)]
            plot.title, plot.traces = name, [Trace(name, name, "cyan")]
        plot.draw(self.series, [], self.baseline.series if self.baseline else None)
