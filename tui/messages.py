"""What the app tells its screens: each poll, a run switch, news of the engine.

Each poll of the watched run is a :class:`Poll` that the app
(:class:`tui.app.RolloutLabApp`) puts in its reactive ``latest_poll``;
screens that draw the run watch it (``self.watch(self.app, "latest_poll",
...)``, from ``on_mount``). Watchers run in the app's own turn on the UI
thread, as the poll lands, so a screen has noted the poll before the cursor's
view that the poll asks for arrives (a message would be handled a turn later,
and the dashboard's first tables would be filled after the screen was
already drawn).

Events are Textual messages: the app posts a fresh one to every screen on its
stack (UI thread); a screen that cares handles it (``on_run_switched``,
``on_engine_status_changed``), the others ignore it. They do not bubble: the
app is their sender, not a receiver. A screen pushed but not mounted yet gets
them after its mount.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from rlab.tui.feed import FeedUpdate, RunFeed
from rlab.tui.supervisor import EngineStatus


@dataclass(frozen=True, eq=False)
class Poll:
    """One poll of the watched run: what it brought (``update``, possibly
    nothing new) and everything read so far (``feed``; its ``lock`` guards it
    against the poll worker)."""

    update: FeedUpdate
    feed: RunFeed


class RunSwitched(Message, bubble=False):
    """The app now watches run ``run_id`` (picked on the runs screen): forget
    the previous run's data; the new run's arrives with the next
    :class:`Poll`."""

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
