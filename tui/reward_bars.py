"""Reward distribution of one step as text bars (the dashboard's ``rewards`` panel).

Pure (rich only): :func:`reward_bins` counts a step's trajectory rewards,
:func:`reward_bars` draws the counts as one bar per line. With few distinct
values (a 0/1 correctness reward, a rubric of a few checks) each value gets
its own bar, so nothing is smeared over bins; otherwise the range
[min, max] is cut into equal-width bins (``numpy.histogram``).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np
from rich.text import Text

BINS = 8
"""At most this many bars."""


def reward_bins(rewards: Sequence[float | None], bins: int = BINS) -> list[tuple[str, int]]:
    """``[(label, count), ...]`` from the lowest reward up; None and NaN are
    left out. Labels are the value itself (few distinct values) or the bin's
    left edge (``>=0.25``). ``bins`` must be >= 1 (ValueError)."""
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    values = [float(r) for r in rewards if r is not None and math.isfinite(r)]
    if not values:
        return []
    distinct = Counter(round(v, 6) for v in values)
    if len(distinct) <= bins:
        return [(f"{value:.2f}", count) for value, count in sorted(distinct.items())]
    counts, edges = np.histogram(values, bins=bins)
    return [(f">={edge:.2f}", int(count)) for edge, count in zip(edges[:-1], counts)]


def reward_bars(rewards: Sequence[float | None], width: int = 14, bins: int = BINS) -> Text:
    """The bars, one line per bin: ``label █████ count``; the longest bar is
    ``width`` cells. "no rewards" when there is nothing to count."""
    counted = reward_bins(rewards, bins)
    if not counted:
        return Text("no rewards", style="dim")
    top = max(count for _, count in counted)
    label_width = max(len(label) for label, _ in counted)
    out = Text()
    for i, (label, count) in enumerate(counted):
        cells = round(width * count / top) if top else 0
        out.append(f"{label:>{label_width}} ")
        out.append("█" * cells or "▏", style="cyan")
        out.append(f" {count}" + ("\n" if i < len(counted) - 1 else ""))
    return out
