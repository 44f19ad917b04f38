"""``rlab inspect``: a run's worst (or failing) trajectories, in full."""

from __future__ import annotations

from typing import Any

from rlab.store.errors import UsageError
from rlab.store.reader import StoreReader, resolve_run
from rlab.store.rows import RunRow

INSPECT_FIELDS = ("id", "step", "example_id", "idx", "prompt", "completion", "reward", "components",
                  "details", "parse_status", "advantage", "truncated", "completion_tokens", "messages")


def worst_trajectories(reader: StoreReader, run: str | int, *, top_k: int = 10, only_fails: bool = False,
                       step: int | None = None) -> tuple[RunRow, list[dict[str, Any]]]:
    """The run row and its ``top_k`` lowest-reward trajectories (of ``step``
    if given; only those that did not solve their task with ``only_fails``),
    lowest first, each with the keys of ``INSPECT_FIELDS``.

    Raises:
        RunNotFoundError: no such run. UsageError: ``top_k`` < 1.
    """
    if top_k < 1:
        raise UsageError(f"--top-k {top_k}: give 1 or more")
    row = resolve_run(reader, run)
    light = reader.lowest_rewards(row["id"], top_k, step=step, failed_only=only_fails)
    full = [reader.trajectory(t["id"]) for t in light]
    return row, [{key: t.get(key) for key in INSPECT_FIELDS} for t in full if t is not None]
