"""What the TUI reads from the store, incrementally and with bounded memory.

:class:`RunFeed` is pure Python (no textual): the app calls :meth:`RunFeed.poll`
from a thread worker a few times a second and hands the returned
:class:`FeedUpdate`, with the feed, to the screens on the UI thread as a
:class:`Poll`. Each poll reads only what is new, by
watermark (last step, last event id, last trajectory rowid), so its cost does
not grow with the file (a run of a million trajectories polls as fast as a
small one). Everything it keeps is bounded: the step series decimates
(:class:`tui.series.StepSeries`), recent rollouts/groups/alerts are deques.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

from rlab.store.reader import StoreReader
from rlab.store.records import STEP_METRIC_COLUMNS, TERMINAL_STATUSES
from rlab.engine.alerts import Alert, AlertThresholds, AlertWatch, GroupStats
from rlab.tui.series import StepSeries

PLOT_METRICS = tuple(STEP_METRIC_COLUMNS)
"""Step metrics (TRL names) kept for the dashboard plots: the store's hot metrics, one list."""

RATE_WINDOW_SECONDS = 30.0
"""Steps/s in the header is measured over this many seconds of arrivals."""

MARK_EVENTS = ("reward_edit", "pause", "fork", "settings")
"""Event kinds marked on the plots' time axis (a fork: its fork step)."""


@dataclass
class FeedUpdate:
    """New data since the previous poll (all lists oldest first).

    ``groups`` holds the groups for the recent-groups table as read (light
    trajectory rows with their completion) until the fold replaces them with
    dashboard rows (:func:`group_summary`). ``watched`` pairs each step row
    a replayed watch observes in this poll with its groups (as read: empty
    for a step older than the backfill). ``final`` is the last step's row
    read again once the run has ended: the engine writes its final held-out
    eval into that row after the feed may have read it. ``latest`` is the
    newest step's every metric (its ``metrics`` JSON) when steps arrived.
    """

    run: dict | None
    steps: list[dict] = field(default_factory=list)
    final: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    rollouts: list[dict] = field(default_factory=list)
    groups: list[dict] = field(default_factory=list)
    watched: list[tuple[dict, list[dict]]] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)
    latest: dict | None = None


def group_summary(group: dict) -> dict:
    """Reduce a reader group dict (with ``trajectories``) to a dashboard row.

    Returns ``{"id", "step", "idx", "prompt", "rewards", "best", "worst"}``
    where best/worst are the completions of the highest/lowest reward.
    """
    trajs = sorted(group.get("trajectories") or [], key=lambda t: t["idx"])
    rewards = [t["reward"] if t["reward"] is not None else float("nan") for t in trajs]
    ranked = sorted(trajs, key=lambda t: t["reward"] if t["reward"] is not None else float("-inf"))
    return {
        "id": group["id"], "step": group["step"], "idx": group["idx"],
        "prompt": group["prompt"], "rewards": rewards,
        "best": ranked[-1]["completion"] if ranked else "",
        "worst": ranked[0]["completion"] if ranked else "",
    }


def group_stats(group: dict) -> GroupStats:
    """The alert watch's view of a reader group dict (with ``trajectories``)."""
    trajs = sorted(group.get("trajectories") or [], key=lambda t: t["idx"])
    return GroupStats(
        step=group["step"], group_id=group["id"],
        rewards=[float(t["reward"] or 0.0) for t in trajs],
        completions=[t["completion"] for t in trajs],
        judge_scores=[t.get("judge_score") for t in trajs],
        successes=[None if t.get("success") is None else bool(t["success"]) for t in trajs],
    )


def groups_with_completions(reader: StoreReader, run_id: int, step: int) -> list[dict]:
    """A step's groups with light trajectory rows plus their ``completion``:
    two queries and no JSON decoding (cheap enough for every streamed step)."""
    groups = reader.groups_of_step(run_id, step)
    texts = reader.completions_of_step(run_id, step)
    for group in groups:
        for traj, completion in zip(group["trajectories"], texts.get(group["id"], [])):
            traj["completion"] = completion
    return groups


class RunFeed:
    """Incremental reader of one run for the dashboard.

    ``reader`` is a :class:`store.reader.StoreReader`; the feed must be polled
    from one thread at a time; other threads read its caches holding
    :attr:`lock`. Alerts are the engine's (its ``alert`` events) unless
    ``replay`` is given: then the feed runs the watch itself over the stored
    steps under those thresholds (``rlab watch --alert``, and runs imported
    from other tools, whose engine raised none).

    The first poll reads only what the dashboard's first screen shows: the
    step series, the newest events and rollouts, and the newest steps'
    groups for the recent-groups table (at most ``backfill_steps`` steps).
    A replayed watch observes steps only in the polls that allow it
    (:meth:`poll`), and then first catches up on the steps it has not seen,
    so the first screen never waits for it (on long completions its
    distinct-n over the backfill takes seconds). ``backfill_steps`` bounds
    how many past steps' groups seed it (reading every group of a
    million-trajectory run would take seconds); the step-metric alerts
    still see every step.
    """

    def __init__(self, reader: StoreReader, run_id: int, *,
                 replay: AlertThresholds | None = None,
                 backfill_steps: int = 20, keep_rollouts: int = 50,
                 keep_groups: int = 50, keep_alerts: int = 200,
                 series_capacity: int = 4096) -> None:
        self.reader = reader
        self.run_id = run_id
        self.series = StepSeries(PLOT_METRICS, series_capacity)
        self.watch = AlertWatch(replay) if replay is not None else None
        self.rollouts: deque[dict] = deque(maxlen=keep_rollouts)
        self.groups: deque[dict] = deque(maxlen=keep_groups)
        self.alerts: deque[Alert] = deque(maxlen=keep_alerts)
        self.marks: deque[dict] = deque(maxlen=500)
        self.backfill_steps = backfill_steps
        self.last_step = -1
        #: The newest step's every metric (``StoreReader.latest_step``), for what has no plot.
        self.latest: dict = {}
        self.watched_step = -1  # the last step a replayed watch observed
        self.arrivals: deque[tuple[float, int]] = deque(maxlen=64)  # (monotonic s, last step)
        self.last_event_id = 0
        self.last_rollout_rowid = 0
        self.run: dict | None = None
        self.ended = False  # the ended run's last step row was read again (FeedUpdate.final)
        self.lock = threading.Lock()

    def poll(self, max_steps: int = 100_000, *, watch: bool = True) -> FeedUpdate:
        """Read what is new since the last poll, then fold it into the caches
        under :attr:`lock` (the UI thread takes the lock to read the caches).
        ``watch`` False holds a replayed watch back: it observes this poll's
        steps at a later poll that allows it."""
        update = self._read(max_steps, watch and self.watch is not None)
        with self.lock:
            # The watch runs under the lock too: the dashboard skips its redraws
            # meanwhile, which keeps the UI thread free for keys (key p95 while
            # 8,000-character steps stream in: 60-77 ms, 172 ms with it outside).
            if self.watch is not None:
                self._observe(self.watch, update)
            self._fold(update)
        return update

    def _read(self, max_steps: int, watching: bool) -> FeedUpdate:
        """The queries: run row, steps, events, rollouts, new steps' groups
        (the first poll: the newest ones; see the class doc), the history a
        replayed watch has yet to observe."""
        reader, run_id = self.reader, self.run_id
        update = FeedUpdate(reader.run(run_id))
        update.steps = reader.step_series(run_id, since_step=self.last_step, limit=max_steps)
        ended = (update.run or {}).get("status") in TERMINAL_STATUSES
        if ended and not self.ended and not update.steps and self.last_step >= 0:  # rows read before it ended
            update.final = reader.step_series(run_id, since_step=self.last_step - 1, limit=1)
        update.events = reader.events(run_id, since_id=self.last_event_id)
        update.rollouts = reader.rollouts_since(run_id, self.last_rollout_rowid,
                                                limit=self.rollouts.maxlen)
        if self.last_step < 0:
            update.groups = self._newest_groups(update.steps)
        else:
            for row in update.steps:
                update.groups.extend(groups_with_completions(reader, run_id, row["step"]))
        if watching:
            update.watched = self._unwatched(update.steps, update.groups, max_steps)
        if update.steps or update.final:
            update.latest = reader.latest_step(run_id)
        return update

    def _newest_groups(self, steps: list[dict]) -> list[dict]:
        """The first poll's groups: the newest steps' (of ``steps``), enough to
        fill the recent-groups table, oldest first."""
        newest: list[list[dict]] = []
        for row in reversed(steps[-self.backfill_steps:]):
            newest.append(groups_with_completions(self.reader, self.run_id, row["step"]))
            if sum(map(len, newest)) >= self.groups.maxlen:
                break
        return [group for groups in reversed(newest) for group in groups]

    def _unwatched(self, steps: list[dict], groups: list[dict],
                   max_steps: int) -> list[tuple[dict, list[dict]]]:
        """The step rows a replayed watch has not observed, up to the newest of
        ``steps`` (this poll's), each with its groups: when it is caught up,
        ``steps`` with ``groups`` (read for the table); when it lags (the
        first poll, or polls that held it back), its rows read again, with
        groups for the newest ``backfill_steps`` of them."""
        if 0 <= self.watched_step == self.last_step:
            by_step: dict[int, list[dict]] = {}
            for group in groups:
                by_step.setdefault(group["step"], []).append(group)
            return [(row, by_step.get(row["step"], [])) for row in steps]
        newest = steps[-1]["step"] if steps else self.last_step
        rows = [row for row in self.reader.step_series(self.run_id, since_step=self.watched_step,
                                                       limit=max_steps) if row["step"] <= newest]
        seeded = {row["step"] for row in rows[-self.backfill_steps:]}
        return [(row, groups_with_completions(self.reader, self.run_id, row["step"])
                 if row["step"] in seeded else []) for row in rows]

    def steps_per_second(self, window: float = RATE_WINDOW_SECONDS, now: float | None = None) -> float | None:
        """Steps per second over the last ``window`` seconds of arrivals, as
        this feed saw new steps (wall clock, so it includes generation,
        scoring, training and evaluation); None with fewer than two arrivals
        in the window (a finished or paused run, or just attached)."""
        now = time.monotonic() if now is None else now
        recent = [(t, s) for t, s in self.arrivals if now - t <= window]
        if len(recent) < 2 or recent[-1][0] <= recent[0][0]:
            return None
        return (recent[-1][1] - recent[0][1]) / (recent[-1][0] - recent[0][0])

    def _observe(self, watch: AlertWatch, update: FeedUpdate) -> None:
        """Run the replayed ``watch`` over the update's ``watched`` steps, in
        order; its alerts go into ``update.alerts``."""
        for row, groups in update.watched:
            update.alerts += watch.observe(row["step"], row, [group_stats(g) for g in groups])
            self.watched_step = row["step"]

    def _fold(self, update: FeedUpdate) -> None:
        """Fold a read, and the alerts found, into the bounded caches."""
        if update.steps:  # the history read on attaching is the baseline of the rate
            self.arrivals.append((time.monotonic(), update.steps[-1]["step"]))
        self.run = update.run
        for ev in update.events:
            self.last_event_id = max(self.last_event_id, ev["id"])
            if ev["kind"] in MARK_EVENTS:
                self.marks.append(ev)
            if ev["kind"] == "alert" and self.watch is None:
                update.alerts.append(Alert.from_event(ev))
        for ro in update.rollouts:
            self.last_rollout_rowid = max(self.last_rollout_rowid, ro["id"])
            self.rollouts.append(ro)
        self.series.extend(update.steps)
        self.series.extend(update.final)  # the same step again: its values replaced
        self.ended = (update.run or {}).get("status") in TERMINAL_STATUSES
        update.groups = [group_summary(g) for g in update.groups]
        self.groups.extend(update.groups)
        if update.steps:
            self.last_step = update.steps[-1]["step"]
        if update.latest is not None:
            self.latest = update.latest
        self.alerts.extend(update.alerts)


@dataclass(frozen=True, eq=False)
class Poll:
    """One poll of the watched run: what it brought (``update``, possibly
    nothing new) and everything read so far (``feed``; its ``lock`` guards it
    against the poll worker)."""

    update: FeedUpdate
    feed: RunFeed
