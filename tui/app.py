"""The Rollout Lab Textual app: live dashboard, inspection screens, control keys.

Threading rule: the UI thread never runs a query. A 0.25 s timer starts a thread worker that polls
the store by watermark (:class:`tui.feed.RunFeed`) and posts the update back with
``call_from_thread``; cursor moves load their data in another thread worker
(:class:`tui.view.ViewLoader`); one-off reads (search, runs list) go through
:meth:`RolloutLabApp.read_in_worker`; commands (pause, resume, step, stop) are written from a worker
too. Polling, cursor moves and one-off reads each have their own :class:`tui.readers.LockedReader`,
i.e. their own SQLite connection, so a slow search never delays a cursor move; each is opened lazily
inside its worker (opening the file may run migrations).

The app tells its screens what happened one way: reactive attributes that the screens watch
(``self.watch(self.app, name, callback)`` in their ``on_mount``; Textual stops calling a screen's
watchers once it is closed):

- ``latest_poll``: each poll of the watched run (:class:`tui.feed.Poll`);
- ``run_id``: the watched run; when the user picks another one on the runs screen, the dashboard
  forgets the previous run's data;
- ``engine_status``: news of the engine the app started, until its run appears
  (:class:`tui.supervisor.EngineSupervisor` watches it);
- ``view``: the data under the cursor (:class:`tui.view.View`), which every
  :class:`tui.view.NavScreen` shows; a screen opened later starts on it (the watch's ``init``).

They are set on the UI thread only: a worker hands its result over with ``call_from_thread``.
Watchers run at the assignment, in the app's own turn, so a screen has noted a poll before the
cursor's view that the poll asks for arrives (a message would be handled a turn later, and the
dashboard's first tables would be filled after the screen was already drawn).
"""

from __future__ import annotations

import gc
import subprocess
from pathlib import Path
from typing import Any, Callable

from pydantic import ValidationError
from textual import work
from textual.app import App
from textual.binding import Binding
from textual.reactive import var
from textual.screen import ModalScreen
from textual.worker import get_current_worker

from rlab.engine.alerts import AlertThresholds
from rlab.engine.rewards.edit.stored import ExampleIndex
from rlab.engine.validation import Problem, one_line
from rlab.store.control import send_command
from rlab.store.db import existing_run_file
from rlab.store.reader import StoreReader
from rlab.tui.dashboard import DashboardScreen
from rlab.tui.dialogs import HelpScreen, SearchScreen
from rlab.tui.feed import FeedUpdate, Poll, RunFeed
from rlab.store.filesize import FileGrowth
from rlab.tui.readers import LockedReader
from rlab.tui.change_dialogs import ChangeActions
from rlab.tui.quit_keys import ACTIVE_STATUSES, QuitActions
from rlab.tui.reward_keys import RewardActions
from rlab.tui.runs import RunsScreen
from rlab.tui.supervisor import EngineExited, EngineProgress, EngineStatus, EngineSupervisor
from rlab.tui.view import VIEWS, Cursor, NavScreen, View, ViewLoader, late_view_keys, load_view_plugins

POLL_SECONDS = 0.25
"""How often the store is polled for new data (seconds)."""

NOTIFY_EVENTS = {"error": ("error", "engine error"), "judge_failed": ("warning", "judge failed"),
                 "reward_edit": ("information", "reward functions changed"),
                 "pause": ("warning", "paused")}
"""Event kinds shown as a toast when they arrive: kind -> (severity, label)."""

MODAL_BLOCKED = frozenset({"toggle_pause", "step_once", "search", "runs", "reward_editor", "revert_rewards", "help",
                           "open", "move_step", "move_group", "move_traj", "fork", "settings"})
"""App actions that a dialog on top (quit, help, search) switches off."""


def _bad_threshold(problem: Problem) -> str:
    """One bad threshold of a run config, by the name ``rlab set RUN alert.NAME=VALUE`` takes."""
    rule = "no such alert setting" if problem.kind == "extra_forbidden" else problem.rule
    return f"alert.{problem.key}: {rule}"


class RolloutLabApp(QuitActions, RewardActions, ChangeActions, App):
    """Watch, pause, step and inspect a training run stored in a SQLite file.

    Args:
        db_path: the run file (created by the engine; the app only reads it
            and writes rows in ``commands``).
        run_id: the run to watch; default the latest run in the file.
        run_name: with ``engine_cmd``, the name of the run the engine will
            create; the app waits for it to appear.
        engine_cmd: a command line that starts the engine; it is spawned in its
            own session (it survives the TUI) with its output in
            ``<db_path>.<run_name>.engine.log`` (:class:`tui.supervisor.EngineSupervisor`).
        thresholds: reward-hacking alert thresholds; if None, the run config's
            ``"alerts"`` dict (see :class:`engine.alerts.AlertThresholds`) or the defaults.

    Raises:
        ValueError: ``engine_cmd`` without ``run_name`` (the app could not tell
            which run is the one it started).
        FileNotFoundError: no ``engine_cmd`` and no file at ``db_path``.

    The reward-edit keys' actions (``e``, ``u``) are in :mod:`tui.reward_keys`, ``q``'s in
    :mod:`tui.quit_keys`.
    """

    CSS_PATH = "app.tcss"
    TITLE = "Rollout Lab"
    ENABLE_COMMAND_PALETTE = False
    AUTO_FOCUS = None  # arrows drive the cursor; screens that need a focused widget say so
    # The reactives the screens watch (see the module doc); set on the UI thread only.
    latest_poll: var[Poll | None] = var(None, always_update=True, init=False)
    """The watched run's latest poll; every poll is news, even one that brought nothing."""
    run_id: var[int | None] = var(None, init=False)
    """The watched run: the one asked for, else the one found, or the one picked on the runs screen."""
    engine_status: var[EngineStatus | None] = var(None, init=False)
    """The latest news of the engine the app started; None before any."""
    view: var[View | None] = var(None, always_update=True, init=False)
    """The data under the cursor. Every load is shown, even one that read the
    same data again (always_update also spares comparing two Views field by field)."""
    run_status: var[str | None] = var(None, init=False, bindings=True)
    """The watched run's status; the footer's keys follow it (:meth:`check_action`)."""
    want_paused: var[bool] = var(False, init=False, bindings=True)
    """Whether the run is paused, or asked to pause (``n`` steps only then)."""
    BINDINGS = [
        Binding("space", "toggle_pause", "Pause"),
        Binding("n", "step_once", "1 step"),
        Binding("slash", "search", "Find", key_display="/"),
        Binding("r", "runs", "Runs"),
        Binding("e", "reward_editor", "Edit rewards"),
        Binding("u", "revert_rewards", "Undo reward edit"),
        Binding("f", "fork", "Fork"),
        Binding("o", "settings", "Settings"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("q", "quit_prompt", "Quit"),
    ]

    def __init__(self, db_path: Path, *, run_id: int | None = None, run_name: str | None = None,
                 engine_cmd: list[str] | None = None,
                 thresholds: AlertThresholds | None = None) -> None:
        super().__init__()
        load_view_plugins()
        for binding in late_view_keys():
            self.bind(binding.key, binding.action, description=binding.description)
        if engine_cmd and not run_name:
            raise ValueError("engine_cmd needs run_name: pass the --name given to the engine")
        if not engine_cmd:
            existing_run_file(db_path)
        self.db_path = Path(db_path)
        self.run_id = run_id
        self.run_name = run_name
        self.engine_cmd = engine_cmd
        self.supervisor = EngineSupervisor(engine_cmd, self.db_path, run_name) if engine_cmd else None
        self.file_growth = FileGrowth(Path(db_path))
        self._missing_reported = False
        self.thresholds = thresholds
        self.feed: RunFeed | None = None
        self.run_row: dict | None = None
        self.cursor = Cursor()
        self._newest_step: int | None = None  # the newest step before the last update
        self._polling = False
        self._painted = False  # the watched run's first view is on the screen
        self._poll_reader = LockedReader(self.db_path)
        self.view_reader = LockedReader(self.db_path)  # screens query through it off the UI thread
        self._one_off_reader = LockedReader(self.db_path)
        self._views = ViewLoader(self.view_reader)
        self.examples = ExampleIndex()

    # ---- lifecycle ---------------------------------------------------------

    def on_mount(self) -> None:
        """Spawn the engine if asked, show the dashboard, start polling."""
        if self.supervisor is not None:
            self.supervisor.spawn()
        self.push_screen(DashboardScreen())
        self.set_interval(POLL_SECONDS, self._start_poll)
        self._start_poll()

    @property
    def engine(self) -> subprocess.Popen | None:
        """The engine process the app started; None without ``engine_cmd``."""
        return self.supervisor.process if self.supervisor is not None else None

    # ---- polling (worker thread) --------------------------------------------

    def _start_poll(self) -> None:
        if not self._polling:
            self._polling = True
            self._poll()

    @work(thread=True, group="poll")
    def _poll(self) -> None:
        """Worker thread: find the run if not yet known, read what is new."""
        feed = self.feed
        try:
            if not self.db_path.exists():  # the spawned engine has not created it yet
                self._check_engine()
                return
            self.file_growth.sample()
            with self._poll_reader as reader:
                if feed is None:
                    run_id = self._find_run(reader)
                    if run_id is None:
                        self._check_engine()
                        return
                    feed = RunFeed(reader, run_id, replay=self._replay(reader.run(run_id)))
                # A replayed watch waits for the first screen to be painted: its
                # catch-up holds the GIL for seconds on long completions.
                update = feed.poll(watch=self._painted)
            self.call_from_thread(self._apply_update, feed, update)
        finally:
            self.call_from_thread(setattr, self, "_polling", False)

    def _check_engine(self) -> None:
        """Worker thread: show the engine's progress until its run appears; report (once) its death."""
        status = self.supervisor.check() if self.supervisor is not None else None
        if status is not None:
            self.call_from_thread(self._show_engine_status, status)

    def _show_engine_status(self, status: EngineStatus) -> None:
        """UI thread: hand the engine's news to the screens, and toast an exit."""
        self.engine_status = status
        if isinstance(status, EngineExited):
            self.notify(status.headline, severity="error", timeout=30)

    @property
    def engine_line(self) -> str | None:
        """The engine log's newest line while it runs, until its run appears."""
        status = self.engine_status
        return status.line if isinstance(status, EngineProgress) else None

    @property
    def engine_failure(self) -> list[str] | None:
        """The engine's exit line and log's last lines, once it exited before its run appeared."""
        status = self.engine_status
        return status.lines if isinstance(status, EngineExited) else None

    def _replay(self, run: dict | None) -> AlertThresholds | None:
        """The thresholds the feed replays the watch under, or None to show the
        engine's own alerts: the app's (``rlab watch --alert``) if given; for a
        run our engine did not watch (imported, or from before the engine
        raised alerts), the run config's ``"alerts"`` or the defaults (a bad
        config is reported)."""
        config = (run or {}).get("config") or {}
        if self.thresholds is not None:
            return self.thresholds
        if config.get("alerts_by") == "engine":
            return None
        try:
            return AlertThresholds.model_validate(config.get("alerts", {}))
        except ValidationError as exc:
            self.call_from_thread(self.notify, f"bad alert thresholds in the run config, using "
                                  f"the defaults: {one_line(exc, _bad_threshold)}", severity="error", timeout=10)
            return AlertThresholds()

    def _find_run(self, reader: StoreReader) -> int | None:
        """Worker thread: the id of the run to watch, None while it does not exist."""
        if self.run_id is not None:
            if reader.run(self.run_id) is not None:
                return self.run_id
            if not self._missing_reported:
                self._missing_reported = True
                names = ", ".join(f"{r['id']} ({r['name']})" for r in reader.runs()) or "none"
                self.call_from_thread(self.notify, f"no run with id {self.run_id} in "
                                      f"{self.db_path}; its runs: {names}. Press r to pick one.",
                                      severity="error", timeout=30)
            return None
        if self.run_name is not None:
            run = reader.run_by_name(self.run_name)
            return run["id"] if run else None
        return reader.latest_run_id()

    def _apply_update(self, feed: RunFeed, update: FeedUpdate) -> None:
        """UI thread: remember the run state and hand the update to the screens."""
        if self.feed is None and self.run_id in (None, feed.run_id):
            self.feed = feed
        if feed is not self.feed:
            return  # read for a run the user switched away from meanwhile
        previous = self.run_row
        self.run_row = update.run
        self.run_id = update.run["id"] if update.run else self.run_id
        status = (update.run or {}).get("status")
        if previous is None or previous.get("status") != status:
            self.want_paused = status == "paused"
            self.run_status = status  # the footer's keys follow it (check_action)
            if previous is not None and status == "running":
                self.file_growth.restart()  # a paused run's file did not grow: its growth starts again
        nothing_shown = self.cursor.step is None or (self.view is not None and self.view.group is None)
        following = (self.cursor.step == self._newest_step and isinstance(self.screen, DashboardScreen))
        follow = bool(update.steps) and (nothing_shown or following)
        if follow:
            # First data, a step with no groups (the engine's step-0 evaluation
            # row), or the dashboard's cursor on the newest step: follow the run.
            # Moved before the screens note the poll, so the header names the new step as followed.
            self.cursor = Cursor(update.steps[-1]["step"], self.cursor.group_pos, self.cursor.traj_pos)
        self.latest_poll = Poll(update, feed)  # the screens' watchers note it now
        if previous is not None:  # not the history read on attaching: that would be a flood
            self._announce(update.events)
        if follow:
            self.load_view()
        self._newest_step = feed.last_step

    def _announce(self, events: list[dict]) -> None:
        """Toast the engine's new errors, failed judge calls and reward edits."""
        for ev in events:
            if ev["kind"] in NOTIFY_EVENTS:
                severity, label = NOTIFY_EVENTS[ev["kind"]]
                detail = "; ".join(f"{k}: {v}" for k, v in (ev.get("payload") or {}).items())
                self.notify(f"step {ev.get('step')}: {label}" + (f" ({detail})" if detail else ""),
                            severity=severity, timeout=10)

    # ---- the cursor -----------------------------------------------------------

    def action_move_step(self, delta: int) -> None:
        """``[``/``]``: the previous/next step that has been written."""
        if self.cursor.step is None or self.feed is None:
            return
        first = self.feed.series.steps[0] if len(self.feed.series) else 0
        last = self.feed.last_step
        self.cursor = Cursor(min(max(self.cursor.step + delta, first), last),
                             self.cursor.group_pos, self.cursor.traj_pos)
        self.load_view()

    def action_follow_newest(self) -> None:
        """``end``: the newest step, and follow the run from there (as on attaching)."""
        if self.feed is None or self.cursor.step is None:
            return
        self.cursor = Cursor(self.feed.last_step, self.cursor.group_pos, self.cursor.traj_pos)
        self.load_view()

    def action_move_group(self, delta: int) -> None:
        """Left/right: the previous/next group of the step."""
        count = len(self.view.groups) if self.view else 0
        if count:
            self.cursor.group_pos = min(max(self.cursor.group_pos + delta, 0), count - 1)
            self.load_view()

    def action_move_traj(self, delta: int) -> None:
        """Up/down: the previous/next trajectory of the group."""
        group = self.view.group if self.view else None
        count = len(group["trajectories"]) if group else 0
        if count:
            self.cursor.traj_pos = min(max(self.cursor.traj_pos + delta, 0), count - 1)
            self.load_view()

    def action_jump_traj(self, which: str) -> None:
        """b / w: the best / worst-rewarded trajectory of the group (the first
        of equals; trajectories without a reward are skipped)."""
        group = self.view.group if self.view else None
        scored = [(t["reward"], pos) for pos, t in enumerate(group["trajectories"] if group else [])
                  if t["reward"] is not None]
        if scored:
            pick = max if which == "best" else min
            self.cursor.traj_pos = pick(scored, key=lambda rp: (rp[0], -rp[1]) if which == "best"
                                        else (rp[0], rp[1]))[1]
            self.load_view()

    def go_to(self, step: int, group_id: int | None = None, traj_id: int | None = None) -> None:
        """Put the cursor on a step (and a group / trajectory by id) and load it."""
        self.cursor = Cursor(step, 0, 0)
        self.load_view(group_id=group_id, traj_id=traj_id)

    @work(thread=True, exclusive=True, group="view")
    def load_view(self, group_id: int | None = None, traj_id: int | None = None) -> None:
        """Read the data under the cursor (cached) and show it on the screens."""
        cursor = Cursor(self.cursor.step, self.cursor.group_pos, self.cursor.traj_pos)
        if cursor.step is None or self.run_id is None:
            return
        view = self._views.load(self.run_id, cursor, group_id, traj_id,
                                with_turns=self._all_turns_shown)
        if not get_current_worker().is_cancelled:
            self.call_from_thread(self._show_view, view)

    @property
    def _all_turns_shown(self) -> bool:
        """Whether an open view shows every trajectory's turns (``ViewEntry.all_turns``)."""
        return any(VIEWS[s.VIEW_NAME].all_turns for s in self.screen_stack
                   if isinstance(s, NavScreen) and s.VIEW_NAME in VIEWS)

    def _show_view(self, view: View) -> None:
        if view.cursor.step != self.cursor.step:
            # A load the cursor moved past while it read (a poll followed the
            # run meanwhile): the newer load is on its way. Taking this one's
            # cursor would put the dashboard back a step and stop it following.
            return
        self.cursor = view.cursor
        self.view = view  # the screens' watchers show it now
        if not self._painted:
            self.call_after_refresh(self._painted_once)

    def _painted_once(self) -> None:
        # Start-up's objects (modules, widgets) live as long as the app: frozen, the full collections a
        # streamed run's garbage triggers skip them (pauses of 90-105 ms, 15 a minute, in issue 47's p95).
        gc.freeze()
        self._painted = True

    def action_open(self, which: str) -> None:
        """A view's key (``g``/``t``/``a``, ``tui.view.VIEWS``): open its screen on the cursor."""
        if which not in VIEWS:
            raise ValueError(f"unknown view {which!r}; expected one of {sorted(VIEWS)}")
        entry = VIEWS[which]
        screen = entry.screen_class()
        if type(self.screen) is screen:
            return
        if isinstance(self.screen, NavScreen) and self.screen is not self.screen_stack[1]:
            self.pop_screen()
        self.push_screen(screen())
        if entry.all_turns:
            self.load_view()  # again, now with every episode's turns

    # ---- control keys -----------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Hide keys that do nothing here (the footer lists only working keys)."""
        if isinstance(self.screen, ModalScreen) and action in MODAL_BLOCKED:
            return False
        status = self.run_status
        if action == "toggle_pause":
            return status in ACTIVE_STATUSES
        if action == "step_once":
            return status in ACTIVE_STATUSES and self.want_paused
        if action == "open" and parameters:  # an inspection screen's key, and not the screen's own
            return isinstance(self.screen, NavScreen) and self.screen.VIEW_NAME != parameters[0]
        return True

    def action_toggle_pause(self) -> None:
        """Space: ask the engine to pause, or to resume when paused."""
        if self.run_id is None:
            return
        self.want_paused = not self.want_paused
        self.send("pause" if self.want_paused else "resume")

    def action_step_once(self) -> None:
        """``n`` (paused): run exactly one more step, then pause again."""
        if self.run_id is not None and self.want_paused:
            self.send("step")

    @work(thread=True, group="command")
    def send(self, kind: str, payload: dict | None = None) -> int:
        """Write a command row for the engine (off the UI thread); returns its id."""
        command_id = send_command(self.db_path, self.run_id, kind, payload)
        self.call_from_thread(self.notify, f"sent {kind}", timeout=2)
        return command_id

    def action_help(self) -> None:
        """``?``: the keys and what they do."""
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_runs(self) -> None:
        """``r``: the runs in the file, with compare."""
        if not isinstance(self.screen, RunsScreen):
            self.push_screen(RunsScreen())

    def action_search(self) -> None:
        """``/``: search trajectory text in this run."""
        if self.run_id is not None and not isinstance(self.screen, SearchScreen):
            self.push_screen(SearchScreen())

    # ---- helpers for screens ---------------------------------------------------------

    @work(thread=True, group="read")
    def read_in_worker(self, fn: Callable[[StoreReader], Any], done: Callable[[Any], None]) -> None:
        """Run ``fn(reader)`` in a thread worker, on the one-off reads' own reader (one at a time), and
        call ``done(result)`` on the UI thread; an exception from ``fn`` ends the app, as any worker's."""
        with self._one_off_reader as reader:
            result = fn(reader)
        self.call_from_thread(done, result)

    def switch_run(self, run_id: int) -> None:
        """Watch another run of the file (picked on the runs screen)."""
        if run_id == self.run_id:
            return
        self.run_name, self.feed, self.run_row, self.view, self.run_status = None, None, None, None, None
        self._painted = False
        self.cursor = Cursor()
        self.run_id = run_id  # last: its watchers find the previous run's state gone

    @property
    def steps_per_second(self) -> float | None:
        """Steps per second as they arrive (see :meth:`RunFeed.steps_per_second`)."""
        return self.feed.steps_per_second() if self.feed is not None else None

