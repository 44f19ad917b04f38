"""What the TUI reads from the store, incrementally and with bounded memory.

:class:`RunFeed` is pure Python (no textual): the app calls :meth:`RunFeed.poll`
from a thread worker a few times a second and renders the returned
:class:`FeedUpdate` on the UI thread. Each poll reads only what is new, by
watermark (last step, last event id, last trajectory rowid), so its cost does
not grow with the file (a run of a million trajectories polls as fast as a
small one). Everything it keeps is bounded: the step series decimates
(:class:`tui.series.StepSeries`), recent rollouts/groups/alerts are deques.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from store.reader import StoreReader
from tui.alerts import Alert, AlertThresholds, AlertWatch, GroupStats
from tui.series import StepSeries

PLOT_METRICS = (
    "reward", "reward_min", "reward_max", "eval/pass_at_1", "reward_std",
    "frac_reward_zero_std", "kl", "clip_ratio", "completions/mean_length", "entropy",
)
"""Step metrics (TRL names) kept for the dashboard plots."""

MARK_EVENTS = ("reward_edit", "pause")
"""Event kinds marked on the plots' time axis."""


@dataclass
class FeedUpdate:
    """New data since the previous poll (all lists oldest first)."""

    run: dict | None
    steps: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)
    rollouts: list[dict] = field(default_factory=list)
    groups: list[dict] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """True when nothing but the run row was read."""
        return not (self.steps or self.events or self.rollouts or self.alerts)


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
    )


class RunFeed:
    """Incremental reader of one run for the dashboard.

    ``reader`` is a :class:`store.reader.StoreReader`; the feed must be polled
    from one thread at a time. ``backfill_steps`` bounds how many past steps'
    groups are read on the first poll to seed the alert watch (reading every
    group of a million-trajectory run would take seconds); the step-metric
    alerts still see every step.
    """

    def __init__(self, reader: StoreReader, run_id: int, *,
                 thresholds: AlertThresholds | None = None,
                 backfill_steps: int = 20, keep_rollouts: int = 200,
                 keep_groups: int = 100, keep_alerts: int = 200,
                 series_capacity: int = 4096) -> None:
        self.reader = reader
        self.run_id = run_id
        self.series = StepSeries(PLOT_METRICS, series_capacity)
        self.watch = AlertWatch(thresholds)
        self.rollouts: deque[dict] = deque(maxlen=keep_rollouts)
        self.groups: deque[dict] = deque(maxlen=keep_groups)
        self.alerts: deque[Alert] = deque(maxlen=keep_alerts)
        self.marks: deque[dict] = deque(maxlen=500)
        self.backfill_steps = backfill_steps
        self.last_step = -1
        self.last_event_id = 0
        self.last_rollout_rowid = 0
        self.run: dict | None = None

    def poll(self, max_steps: int = 100_000) -> FeedUpdate:
        """Read what is new since the last poll and fold it into the caches."""
        self.run = self.reader.run(self.run_id)
        update = FeedUpdate(self.run)
        first = self.last_step < 0
        update.steps = self.reader.step_series(self.run_id, since_step=self.last_step, limit=max_steps)
        update.events = self.reader.events(self.run_id, since_id=self.last_event_id)
        update.rollouts = self.reader.rollouts_since(self.run_id, self.last_rollout_rowid,
                                                     limit=self.rollouts.maxlen)
        for ev in update.events:
            self.last_event_id = max(self.last_event_id, ev["id"])
            if ev["kind"] in MARK_EVENTS:
                self.marks.append(ev)
        for ro in update.rollouts:
            self.last_rollout_rowid = max(self.last_rollout_rowid, ro["id"])
            self.rollouts.append(ro)
        self.series.extend(update.steps)
        self._watch_steps(update, first)
        return update

    def _watch_steps(self, update: FeedUpdate, first: bool) -> None:
        """Feed new steps to the alert watch, with their groups where affordable."""
        if not update.steps:
            return
        backfill_from = update.steps[-1]["step"] - self.backfill_steps if first else -1
        for row in update.steps:
            step = row["step"]
            groups = []
            if step > backfill_from:
                groups = [self.reader.group(g["id"])
                          for g in self.reader.groups_of_step(self.run_id, step)]
                summaries = [group_summary(g) for g in groups]
                self.groups.extend(summaries)
                update.groups.extend(summaries)
            new = self.watch.observe(step, row, [group_stats(g) for g in groups])
            self.alerts.extend(new)
            update.alerts.extend(new)
            self.last_step = step
