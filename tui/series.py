"""Bounded step series and downsampling for the plots (pure, no textual).

The dashboard plots whole runs (tens of thousands of steps) in a terminal a
hundred cells wide, for hours, with flat memory. :class:`StepSeries` keeps at
most ``capacity`` points per metric by halving its resolution when full;
:func:`downsample` reduces what is drawn to one point per plot column.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Sequence


def _finite(value: object) -> float:
    """A plottable float, NaN for a missing or non-numeric value."""
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return math.nan


class StepSeries:
    """Per-step metric columns with bounded memory.

    ``append(step, row)`` takes a step row keyed by TRL metric names (missing
    metrics are stored as NaN). When more than ``capacity`` points are held,
    every other point is dropped and from then on only every ``stride``-th
    step is kept (stride doubles each time), so memory stays at
    ``capacity * (len(metrics) + 1) * 8`` bytes whatever the run length. The
    newest step is always held in :attr:`last`.
    """

    def __init__(self, metrics: Sequence[str], capacity: int = 4096) -> None:
        if capacity < 2:
            raise ValueError(f"capacity must be >= 2, got {capacity}")
        self.metrics = tuple(metrics)
        self.capacity = capacity
        self.stride = 1
        self.steps = array("q")
        self.columns = {m: array("d") for m in self.metrics}
        self.last: dict | None = None
        self._seen = 0

    def __len__(self) -> int:
        return len(self.steps)

    def append(self, step: int, row: dict) -> None:
        """Add one step; steps must increase (an older step is ignored, the same
        step again replaces its values, as the store upserts step rows)."""
        if self.last is not None and step <= self.last["step"]:
            if step == self.last["step"]:
                self.last = {"step": step, **row}
                if self.steps and self.steps[-1] == step:
                    for m, col in self.columns.items():
                        col[-1] = _finite(row.get(m))
            return
        self.last = {"step": step, **row}
        keep = self._seen % self.stride == 0
        self._seen += 1
        if not keep:
            return
        self.steps.append(step)
        for m, col in self.columns.items():
            col.append(_finite(row.get(m)))
        if len(self.steps) > self.capacity:
            self._halve()

    def extend(self, rows: Iterable[dict]) -> None:
        """Append step rows that each carry their ``step``."""
        for row in rows:
            self.append(int(row["step"]), row)

    def _halve(self) -> None:
        start = (len(self.steps) - 1) % 2  # keep the newest point
        self.steps = self.steps[start::2]
        for m in self.metrics:
            self.columns[m] = self.columns[m][start::2]
        self.stride *= 2
        self._seen = 1  # the next kept step is `stride` steps after the last kept one

    def xy(self, metric: str) -> tuple[list[float], list[float]]:
        """Steps and values of ``metric`` where present (NaN skipped), newest step included."""
        col = self.columns[metric]
        pairs = [(s, v) for s, v in zip(self.steps, col) if not math.isnan(v)]
        if self.last is not None and (not self.steps or self.last["step"] > self.steps[-1]):
            value = _finite(self.last.get(metric))
            if not math.isnan(value):
                pairs.append((self.last["step"], value))
        return [p[0] for p in pairs], [p[1] for p in pairs]


def downsample(xs: Sequence[float], ys: Sequence[float], width: int,
               how: str = "mean") -> tuple[list[float], list[float]]:
    """Reduce (xs, ys) to at most ``width`` points, one per bucket of equal count.

    ``how`` is ``mean``, ``min`` or ``max`` of each bucket's ys (x is the
    bucket's mean x), so a min/max band survives downsampling. Raises
    ValueError for an unknown ``how``, mismatched lengths or width < 1.
    """
    reducers = {"mean": lambda v: sum(v) / len(v), "min": min, "max": max}
    if how not in reducers:
        raise ValueError(f"how must be one of {sorted(reducers)}, got {how!r}")
    if len(xs) != len(ys):
        raise ValueError(f"xs and ys differ in length: {len(xs)} != {len(ys)}")
    if width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    n = len(xs)
    if n <= width:
        return list(xs), list(ys)
    reduce = reducers[how]
    out_x, out_y = [], []
    for b in range(width):
        lo, hi = b * n // width, (b + 1) * n // width
        out_x.append(sum(xs[lo:hi]) / (hi - lo))
        out_y.append(reduce(ys[lo:hi]))
    return out_x, out_y
