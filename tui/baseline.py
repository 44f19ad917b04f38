"""A baseline run: its step metrics, overlaid on the dashboard's plots.

``p`` in the runs list (``r``) pins the highlighted run (again: unpins); a
fork's parent is its baseline until another is pinned, so every plot draws
the branch that did not get the change beside the one that did (the fork
step is marked). The dashboard draws each plotted metric of the baseline
beside the watched run's, and the metrics view (``m``) does the same for any
metric. Pure (no textual): the screens call :func:`load_baseline` through
``app.read_in_worker``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from rlab.store.reader import StoreReader
from rlab.tui.series import StepSeries


def metric_series(rows: Iterable[dict]) -> StepSeries:
    """A :class:`StepSeries` of every numeric metric in ``rows`` (``{"step",
    name: value, ...}``, as ``StoreReader.step_metrics`` returns them),
    capacity large enough to keep every step of a normal run."""
    rows = list(rows)
    names = sorted({k for row in rows for k, v in row.items()
                    if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)
                    and math.isfinite(v)})
    series = StepSeries(names, capacity=max(4096, len(rows)))
    series.extend(rows)
    return series


@dataclass(frozen=True)
class Baseline:
    """The baseline run: its id, name, every stored step metric, how the
    plots label it (``base``: pinned; ``parent``: the watched fork's parent)
    and whether it was still running when read (then it is read again)."""

    run_id: int
    name: str
    series: StepSeries
    label: str = "base"
    live: bool = False


def load_baseline(reader: StoreReader, run_id: int, label: str = "base") -> Baseline | None:
    """Read run ``run_id`` as a baseline; None when the file has no such run."""
    run = reader.run(run_id)
    if run is None:
        return None
    return Baseline(run_id, run["name"], metric_series(reader.step_metrics(run_id)), label,
                    run["status"] in ("running", "paused"))
