"""Live metric plots (textual-plotext) that draw at most one point per column."""

from __future__ import annotations

from dataclasses import dataclass

from textual_plotext import PlotextPlot

from rlab.tui.series import StepSeries, downsample

MARK_COLORS = {"reward_edit": "magenta", "pause": "orange", "fork": "cyan", "settings": "yellow"}
"""Colour of the vertical line marking each event kind on the time axis."""


@dataclass(frozen=True)
class Trace:
    """One metric drawn on a plot.

    ``how`` reduces a bucket of steps to one point (``mean``, or ``min``/``max``
    for the edges of a band); ``scatter`` draws points instead of a line;
    ``yside`` is ``left`` or ``right`` (a second y axis).
    """

    metric: str
    label: str
    color: str
    how: str = "mean"
    scatter: bool = False
    yside: str = "left"


def step_ticks(lo: float, hi: float, count: int = 5) -> list[int]:
    """Up to ``count`` whole-step tick positions spread over [lo, hi]."""
    a, b = int(round(lo)), int(round(hi))
    return sorted({a + (b - a) * k // (count - 1) for k in range(count)})


class MetricPlot(PlotextPlot):
    """A plot of some step metrics over steps, with event marks.

    Call :meth:`draw` with the run's :class:`tui.series.StepSeries`; it
    downsamples each trace to the plot's width in cells, so drawing costs
    O(width) whatever the run length.
    """

    def __init__(self, title: str, traces: list[Trace], *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.title = title
        self.traces = traces
        self._last: tuple[StepSeries, list[dict], StepSeries | None, str] | None = None

    def on_resize(self) -> None:
        """Downsample again to the new width."""
        # Outside the feed's lock: a concurrent append can at worst drop the
        # newest point from this one frame (zip stops at the shorter column).
        if self._last is not None:
            self.draw(*self._last)

    def draw(self, series: StepSeries, marks: list[dict] = (), baseline: StepSeries | None = None,
             baseline_label: str = "base") -> None:
        """Redraw from ``series``; ``marks`` are events (``kind``, ``step``) to
        mark; ``baseline`` (a pinned run's or a fork's parent's metrics,
        :mod:`tui.baseline`) is drawn dotted under each line trace it has,
        labelled ``... · {baseline_label}``."""
        self._last = (series, list(marks), baseline, baseline_label)
        plt = self.plt
        plt.clear_data()
        plt.title(self.title)
        width = max(self.size.width - 12, 8)  # leave room for the y tick labels
        drawn_x: list[float] = []
        if baseline is not None:
            drawn_x.extend(self._draw_baseline(baseline, width, baseline_label))
        for trace in self.traces:
            xs, ys = series.xy(trace.metric)
            if not xs:
                continue
            xs, ys = downsample(xs, ys, width, trace.how)
            draw = plt.scatter if trace.scatter else plt.plot
            draw(xs, ys, label=trace.label, color=trace.color, yside=trace.yside,
                 marker="dot" if trace.scatter else "braille")
            drawn_x.extend((xs[0], xs[-1]))
        if drawn_x:
            lo, hi = min(drawn_x), max(drawn_x)
            plt.xticks(step_ticks(lo, hi))
            for mark in marks:
                step = mark.get("step")
                if step is not None and lo <= step <= hi:
                    plt.vline(step, MARK_COLORS.get(mark["kind"], "white"))
        self.refresh()

    def _draw_baseline(self, baseline: StepSeries, width: int, label: str = "base") -> list[float]:
        """The baseline's line traces (band edges and scatters left out); the
        x range they cover."""
        drawn_x: list[float] = []
        for trace in self.traces:
            if trace.how != "mean" or trace.scatter or trace.metric not in baseline.columns:
                continue
            xs, ys = baseline.xy(trace.metric)
            if not xs:
                continue
            xs, ys = downsample(xs, ys, width)
            self.plt.plot(xs, ys, label=f"{trace.label} · {label}", color=trace.color, yside=trace.yside,
                          marker="dot")
            drawn_x.extend((xs[0], xs[-1]))
        return drawn_x
