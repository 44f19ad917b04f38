"""The inspection cursor shared by the screens, and the data it points at.

The user moves one cursor through the run: ``[``/``]`` steps, left/right the
groups of a step, up/down the trajectories of a group. Every inspection screen
(dashboard, group view, trajectory inspector, advantages view) shows the same
:class:`View`; the app reads it off the UI thread (:class:`ViewLoader`, in a
thread worker) and puts it in its reactive ``view``, which every
:class:`NavScreen` watches. :class:`NavScreen` also holds the key bindings, so
the footer lists them only on screens where they work.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from importlib.metadata import entry_points

from textual.binding import Binding
from textual.screen import Screen

from rlab.store.reader import StoreReader
from rlab.tui.readers import LRU, LockedReader


@dataclass
class Cursor:
    """Where the user is: a step, a group position in it, a trajectory position."""

    step: int | None = None
    group_pos: int = 0
    traj_pos: int = 0


@dataclass
class View:
    """The data under the cursor, as the reader returns it.

    ``groups`` are the step's group rows (ordered by index), ``group`` the
    selected group with its ``trajectories``, ``trajectory`` the selected
    trajectory with its ``turns``, ``turns`` every trajectory's turns of the
    group keyed by trajectory id (for the advantages view).
    """

    cursor: Cursor
    groups: list[dict] = field(default_factory=list)
    group: dict | None = None
    trajectory: dict | None = None
    turns: dict[int, list[dict]] = field(default_factory=dict)


class ViewLoader:
    """Reads the :class:`View` under a cursor, with bounded caches of what
    it read (a step's groups, a group, a trajectory), so moving back and forth
    costs no queries. Runs queries: call :meth:`load` off the UI thread.

    Args:
        locked: the reader of cursor moves; its lock also guards the caches.
        steps, groups, trajectories: how many of each the caches keep.
    """

    def __init__(self, locked: LockedReader, *, steps: int = 64, groups: int = 64,
                 trajectories: int = 256) -> None:
        self._locked = locked
        self._groups_cache = LRU(steps)
        self._group_cache = LRU(groups)
        self._traj_cache = LRU(trajectories)

    def load(self, run_id: int, cursor: Cursor, group_id: int | None = None,
             traj_id: int | None = None, with_turns: bool = False) -> View:
        """The data under ``cursor`` in run ``run_id``.

        ``cursor`` is clamped to what exists (and moved onto ``group_id`` /
        ``traj_id`` when given and found) in place; the returned view holds
        it. ``with_turns``: every trajectory's turns of the group (one query
        per trajectory; the advantages view needs them), else only the
        selected one's.
        """
        with self._locked as reader:
            return self._read(reader, run_id, cursor, group_id, traj_id, with_turns)

    def _read(self, reader: StoreReader, run_id: int, cursor: Cursor,
              group_id: int | None, traj_id: int | None, with_turns: bool) -> View:
        groups = self._groups_cache.fetch((run_id, cursor.step),
                                          lambda: reader.groups_of_step(run_id, cursor.step))
        view = View(cursor, groups)
        if not groups:
            return view
        if group_id is not None:
            cursor.group_pos = next((i for i, g in enumerate(groups) if g["id"] == group_id), 0)
        cursor.group_pos = min(cursor.group_pos, len(groups) - 1)
        gid = groups[cursor.group_pos]["id"]
        view.group = self._group_cache.fetch(gid, lambda: reader.group(gid))
        trajs = view.group["trajectories"] if view.group else []
        if not trajs:
            return view
        if traj_id is not None:
            cursor.traj_pos = next((i for i, t in enumerate(trajs) if t["id"] == traj_id), 0)
        cursor.traj_pos = min(cursor.traj_pos, len(trajs) - 1)
        # Every episode's turns only when the advantages view is open: that
        # is one query per trajectory, the rest of the screens need one.
        wanted = trajs if with_turns else [trajs[cursor.traj_pos]]
        for t in wanted:
            full = self._traj_cache.fetch(t["id"], lambda tid=t["id"]: reader.trajectory(tid))
            view.turns[t["id"]] = (full.get("turns") or []) if full else []
        view.trajectory = self._traj_cache.fetch(trajs[cursor.traj_pos]["id"], lambda: None)
        return view


@dataclass(frozen=True)
class ViewEntry:
    """An inspection view: its key opens its screen on the cursor's :class:`View`.

    name: the view's name (``app.open(name)``; its screen's ``VIEW_NAME``).
    key: the key that opens it. label: its footer label. help: its line in
    the help screen (``?``). screen: its :class:`NavScreen` subclass, or
    ``"module:Class"``, imported when first opened. all_turns: it shows
    every trajectory's turns of the group (:attr:`View.turns`), read only
    while it is open.
    """

    name: str
    key: str
    label: str
    help: str
    screen: str | type[NavScreen]
    all_turns: bool = False

    def screen_class(self) -> type[NavScreen]:
        """The view's screen class (imported now if given as ``"module:Class"``)."""
        if isinstance(self.screen, str):
            module, _, name = self.screen.partition(":")
            return getattr(importlib.import_module(module), name)
        return self.screen


VIEWS: dict[str, ViewEntry] = {}
"""The registered views by name, in the order their keys show: a new view is
its module plus one :func:`register_view` call (or a ``rlab.views`` entry point)."""

#: The entry-point group a package registers its own views in (each a :class:`ViewEntry`).
VIEWS_GROUP = "rlab.views"

CURSOR_BINDINGS = [
    Binding("left_square_bracket", "app.move_step(-1)", "Step", key_display="[ ]"),
    Binding("right_square_bracket", "app.move_step(1)", "Next step", show=False),
    # priority: a focused table (the alerts panel after tab) binds end to its last row
    Binding("end", "app.follow_newest", "Newest", show=False, priority=True),
    Binding("left", "app.move_group(-1)", "Groups", key_display="← →"),
    Binding("right", "app.move_group(1)", "Next group", show=False),
    Binding("up", "app.move_traj(-1)", "Trajs", key_display="↑ ↓"),
    Binding("down", "app.move_traj(1)", "Next traj", show=False),
    Binding("b", "app.jump_traj('best')", "Best", show=False),
    Binding("w", "app.jump_traj('worst')", "Worst", show=False),
]
"""Cursor keys, shared by the inspection screens (each arrow pair shows once in the footer)."""


def register_view(entry: ViewEntry) -> None:
    """Add ``entry`` to :data:`VIEWS`: its key opens it on every inspection screen
    made from now on, and the help screen lists it.

    Raises:
        ValueError: its name is registered, or its key is a cursor key or another view's.
    """
    taken = {b.key for b in CURSOR_BINDINGS} | {v.key for v in VIEWS.values()}
    if entry.name in VIEWS or entry.key in taken:
        raise ValueError(f"view {entry.name!r} (key {entry.key!r}): that name or key is taken; "
                         f"keys in use: {', '.join(sorted(taken))}")
    VIEWS[entry.name] = entry


def load_view_plugins() -> None:
    """Register the views other packages declare under :data:`VIEWS_GROUP` (once each)."""
    for point in entry_points(group=VIEWS_GROUP):
        if point.name not in VIEWS:
            register_view(point.load())


def _binding(entry: ViewEntry) -> Binding:
    return Binding(entry.key, f"app.open({entry.name!r})", entry.label)


for _entry in (
    ViewEntry("group", "g", "Group", "group view: the group's trajectories side by side",
              "rlab.tui.group_view:GroupScreen"),
    ViewEntry("trajectory", "t", "Traj", "trajectory inspector: turns, details, tokens shaded by advantage",
              "rlab.tui.inspector:TrajectoryScreen"),
    ViewEntry("advantages", "a", "Adv", "advantages view: per-turn GiGPO advantages and anchor groups",
              "rlab.tui.advantages:AdvantagesScreen", all_turns=True),
):
    register_view(_entry)

NAV_BINDINGS = CURSOR_BINDINGS + [_binding(v) for v in VIEWS.values()]
"""The cursor keys and the built-in views' keys (what every :class:`NavScreen` class binds)."""


def late_view_keys() -> list[Binding]:
    """The keys of the views registered since :data:`NAV_BINDINGS` was made (a plugin's, a test's).

    Textual merges a screen's ``BINDINGS`` once, when its class is made, so the
    app binds these itself (``App.bind``); its ``check_action`` keeps them to
    the :class:`NavScreen` screens, as the built-in views' keys are.
    """
    made = {binding.key for binding in NAV_BINDINGS}
    return [_binding(entry) for entry in VIEWS.values() if entry.key not in made]


class NavScreen(Screen):
    """A screen that shows the cursor's :class:`View` (the app's ``view``)
    and takes the cursor keys."""

    BINDINGS = NAV_BINDINGS
    VIEW_NAME: str | None = None
    """Its name in :data:`VIEWS` (``group``, ...): its own key is hidden here."""

    def on_mount(self) -> None:
        # init: a screen opened after the cursor moved starts on the current view.
        self.watch(self.app, "view", self._view_changed)

    def _view_changed(self, view: View | None) -> None:
        # A popped screen runs on until it is removed; it no longer follows the cursor.
        if view is not None and self in self.app.screen_stack:
            self.show_view(view)

    def show_view(self, view: View) -> None:
        """Render ``view``; screens override this (called on the UI thread)."""
