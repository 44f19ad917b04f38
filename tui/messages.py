"""What the app tells its screens, as Textual messages.

The app (:class:`tui.app.RolloutLabApp`) posts a fresh message to every
screen on its stack, on the UI thread; a screen that cares handles it
(``on_feed_updated``, ``on_run_switched``, ``on_engine_status_changed``), the
others ignore it. The messages do not bubble: the app is their sender, not a
receiver. A screen pushed but not mounted yet gets them after its mount.
"""

from __future__ import annotations

from textual.message import Message

from rlab.tui.feed import FeedUpdate, RunFeed
from rlab.tui.supervisor import EngineStatus


class FeedUpdated(Message, bubble=False):
    """A poll of the watched run brought ``update`` (possibly nothing new);
    ``feed`` holds everything read so far (its ``lock`` guards it against the
    poll worker)."""

    def __init__(self, update: FeedUpdate, feed: RunFeed) -> None:
        super().__init__()
        self.update = update
        self.feed = feed


class RunSwitched(Message, bubble=False):
    """The app now watches run ``run_id`` (picked on the runs screen): forget
    the previous run's data; the new run's arrives with the next
    :class:`FeedUpdated`."""

    def __init__(self, run_id: int) -> None:
        super().__init__()
        self.run_id = run_id


class EngineStatusChanged(Message, bubble=False):
    """News of the engine the app started, before its run appears: a new log
    line, or its exit (see :mod:`tui.supervisor`). The app's ``engine_line``
    and ``engine_failure`` already hold it when this arrives."""

    def __init__(self, status: EngineStatus) -> None:
        super().__init__()
        self.status = status
