"""Changes as experiments from the TUI: ``f`` forks the run, ``o`` changes its settings between steps.

``f`` forks the watched run from its checkpoint at or before the cursor's
step (``rlab fork RUN@STEP``): a dialog takes the fork's name and the
options to change, typed as on the command line (``--lr 2e-5 --rewards
FILE``). They are checked as ``rlab fork`` checks them (``engine.cli.run.checked_fork``),
then the fork starts as its own engine process (it outlives the TUI, as the
run the TUI started does), beside the parent in the same run file; ``r``
lists it under its parent, and watching it draws the parent's curves beside
its own. ``o`` (``rlab set RUN KEY=VALUE``) sends a settings change, checked
first as ``rlab set`` checks it, and shows the engine's answer.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from typing import TYPE_CHECKING, Any, Callable

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Footer, Input, Static

from rlab.store.reader import StoreReader
from rlab.tui.supervisor import EngineSupervisor
from rlab.tui.view import Cursor

if TYPE_CHECKING:
    from textual.app import App

    _Base = App  # to the type checker the mixin is the App it is mixed into
else:
    _Base = object


class ChangeActions(_Base):
    """``f`` and ``o`` of :class:`tui.app.RolloutLabApp` (a mixin, as :mod:`tui.reward_keys`)."""

    # What the actions use of tui.app.RolloutLabApp, which sets them.
    db_path: Path
    run_id: int | None
    run_row: dict | None
    cursor: Cursor
    read_in_worker: Callable[[Callable[[StoreReader], Any], Callable[[Any], None]], Any]

    def action_fork(self) -> None:
        """``f``: fork the run from its checkpoint at or before the cursor's step."""
        run, run_id, step = self.run_row, self.run_id, self.cursor.step
        if run is None or run_id is None or run.get("kind") != "train":
            self.notify("f forks a training run: watch one first", severity="warning")
            return
        if not run.get("config", {}).get("model_dir"):
            self.notify(f"{run['name']} was imported from another tool: it holds no weights to fork from "
                        "(fork the runs rlab trains)", severity="warning")
            return
        at = step if step is not None else run.get("last_step") or 0
        self.read_in_worker(lambda reader: fork_point(reader, run_id, at),
                            lambda point: self._fork_at(run["name"], at, point))

    def _fork_at(self, name: str, step: int, point: int | None) -> None:
        if point is None:
            self.notify(f"{name} has no checkpoint at or before step {step} yet (one every --checkpoint-every "
                        "steps); move the cursor later ( ] ) or wait", severity="warning")
            return
        self.push_screen(ForkScreen(self.db_path, name, point), self._forked)

    def _forked(self, name: str | None) -> None:
        if name is not None:
            self.notify(f"fork {name} started beside this run; r lists it under its parent, enter watches it "
                        "(its parent's curves dotted beside its own)", timeout=8)

    def action_settings(self) -> None:
        """``o``: change the run's settings between two steps (``rlab set``)."""
        run = self.run_row
        if run is None or run.get("status") not in ("running", "paused"):
            self.notify("o changes a live run's settings; fork a finished one (f)", severity="warning")
            return
        self.push_screen(SettingsScreen(self.db_path, run["name"], run["scenario"]),
                         lambda answer: answer and self.notify(answer, timeout=6))


def fork_point(reader: StoreReader, run_id: int, step: int) -> int | None:
    """The newest step at or before ``step`` a fork can start from, as ``rlab fork`` finds them
    (``engine.run.fork.fork_points``: the run's start and its checkpoints); None: none."""
    from rlab.engine.run.fork import fork_points  # the engine's imports wait until a fork is asked for

    run = reader.run(run_id)
    steps = [s for s in fork_points(run, reader.checkpoints(run_id)) if s <= step] if run is not None else []
    return max(steps) if steps else None


def fork_command(db: Path, run: str, step: int, name: str, options: str) -> list[str]:
    """``rlab fork``'s argument words for a fork of ``run`` at ``step`` (``options``: typed flags).

    Raises:
        ValueError: ``options`` does not split into words (an unclosed quote).
    """
    return ["fork", f"{run}@{step}", "--name", name, "--db", str(db), "--headless", *shlex.split(options)]


class ForkScreen(ModalScreen[str | None]):
    """``f``: fork the watched run at a checkpoint; dismisses with the fork's name once it started."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Cancel")]
    # The name first, and never selected on focus: a tab into a selected field made the next
    # key replace the name (issue 47, 4).
    AUTO_FOCUS = "#fork-name"

    def __init__(self, db: Path, run: str, step: int) -> None:
        super().__init__()
        self.db, self.run, self.step = db, run, step

    def compose(self) -> ComposeResult:
        with Vertical(id="fork-box"):
            yield Static(f"fork {self.run} from its checkpoint of step {self.step}: a new run in this file, "
                         "the parent goes on. Options as for rlab fork; the task, model and LoRA stay.")
            yield Input(value=f"{self.run}-{self.step}b", placeholder="name of the fork", id="fork-name",
                        select_on_focus=False)
            yield Input(placeholder="--lr 2e-5 --rewards path/to/rewards.py (enter: start)", id="fork-options",
                        select_on_focus=False)
            yield Static("", id="fork-error")
        yield Footer(compact=True)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter: check the fork, then start it."""
        name = self.query_one("#fork-name", Input).value.strip()
        options = self.query_one("#fork-options", Input).value
        self.query_one("#fork-error", Static).update("checking ...")
        self._start(name, options)

    @work(thread=True, exclusive=True, group="fork")
    def _start(self, name: str, options: str) -> None:
        from rlab.engine.cli.run import checked_fork  # the engine's imports wait until a fork is asked for

        try:
            command = checked_fork(fork_command(self.db, self.run, self.step, name, options))
            EngineSupervisor(command, self.db, name).spawn()
        except Exception as err:  # noqa: BLE001 - a refusal is shown in the dialog, never raised in the UI
            self.app.call_from_thread(self._refused, str(err).removeprefix("rlab: error: "))
            return
        self.app.call_from_thread(self.dismiss, name)

    def _refused(self, message: str) -> None:
        self.query_one("#fork-error", Static).update(f"[red]{message}[/red]")


class SettingsScreen(ModalScreen[str | None]):
    """``o``: change the watched run's settings at its next step boundary (``rlab set``);
    dismisses with the engine's answer. It names what the run's trainer takes
    between steps and what it refuses (``engine.run.settings.trainer_settings``: a
    TRL run takes fewer than our engine)."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Cancel")]
    AUTO_FOCUS = "#settings-input"

    def __init__(self, db: Path, run: str, scenario: str) -> None:
        super().__init__()
        self.db, self.run, self.scenario = db, run, scenario

    def compose(self) -> ComposeResult:
        from rlab.engine.run.settings import trainer_settings

        rules = trainer_settings(self.scenario)
        takes = ", ".join(n for n in rules.between_steps if n != "alerts")
        alerts = "; an alert threshold as alert.NAME" if "alerts" in rules.between_steps else ""
        refused = f"; not {', '.join(rules.refused)}: `rlab set` says why" if rules.refused else ""
        with Vertical(id="settings-box"):
            yield Static(f"change {self.run}'s settings from its next step ({takes}{alerts}{refused})")
            yield Input(placeholder="lr=2e-5 temperature=0.9 (enter: send)", id="settings-input")
            yield Static("", id="settings-error")
        yield Footer(compact=True)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter: check, send, and wait for the engine's answer."""
        self.query_one("#settings-error", Static).update("sending ...")
        self._send(event.value.split())

    @work(thread=True, exclusive=True, group="settings")
    def _send(self, words: list[str]) -> None:
        from rlab.engine.run.live_settings import send_settings

        try:
            answer = send_settings(self.db, self.run, words)
        except Exception as err:  # noqa: BLE001 - a refusal is shown in the dialog
            self.app.call_from_thread(self._refused, str(err))
            return
        self.app.call_from_thread(self.dismiss, answer)

    def _refused(self, message: str) -> None:
        self.query_one("#settings-error", Static).update(f"[red]{message}[/red]")
