"""The app's ``q``: quit, asking first whether to stop a run that is still going.

:class:`QuitActions` is a mixin of :class:`tui.app.RolloutLabApp` (as
:mod:`tui.reward_keys` is). A run is still going while it is running or
paused, and also before its row exists, while the engine the app spawned loads
or builds the run's policy (minutes to an hour): quitting then asks too, and
"stop" ends that engine with SIGTERM (a build ends within a second:
``engine.train.building``), since there is no run yet to send a command to.
"""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from rich.text import Text
from textual import work

from rlab.tui.dialogs import QuitScreen

if TYPE_CHECKING:
    from textual.app import App

    from rlab.tui.supervisor import EngineSupervisor

    _Base = App  # to the type checker the mixin is the App it is mixed into
else:
    _Base = object

#: Run statuses in which an engine still drives the run.
ACTIVE_STATUSES = ("running", "paused")


class QuitActions(_Base):
    """``q`` of :class:`tui.app.RolloutLabApp` and the answer to its question."""

    # What the actions use of tui.app.RolloutLabApp, which sets them.
    db_path: Path
    run_id: int | None
    run_name: str | None
    run_row: dict | None
    supervisor: EngineSupervisor | None
    send: Callable[..., Any]

    def action_quit_prompt(self) -> None:
        """``q``: quit; while the run is active, or its engine still starts, ask whether to stop it first."""
        if isinstance(self.screen, QuitScreen):
            return
        starting = self.run_id is None and self.supervisor is not None and self.supervisor.running
        if (self.run_row or {}).get("status") not in ACTIVE_STATUSES and not starting:
            self.exit()
            return
        self.push_screen(QuitScreen(), self._on_quit_choice)

    @work(group="command")
    async def _on_quit_choice(self, choice: str | None) -> None:
        if choice == "stop" and self.run_id is None and self.supervisor is not None:
            await asyncio.to_thread(self.supervisor.stop)  # no run to send a command to yet: SIGTERM it
            self.exit()
        elif choice == "stop":
            worker = self.send("stop")
            await worker.wait()
            self.exit()
        elif choice == "leave":
            self.exit(message=self._left_running())

    def _left_running(self) -> Text:
        """What the terminal shows once the TUI quit leaving the run running (Textual's exit message)."""
        name = (self.run_row or {}).get("name") or self.run_name or str(self.run_id)
        db, run = shlex.quote(str(self.db_path)), shlex.quote(name)
        return Text(f"rlab: run {name} goes on; attach again with: rlab watch --db {db} {run} "
                    f"(or stop it: rlab stop {run} --db {db})")
