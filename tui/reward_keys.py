"""The app's reward-edit keys: ``e`` edits the run's reward functions, ``u``
goes back to the version before the current one.

:class:`RewardActions` is a mixin of :class:`tui.app.RolloutLabApp`: Textual
looks an action up by name on the app, so the actions stay methods of the
app's class while their code lives here, and ``app.py`` keeps the wiring (the
key bindings, the dialogs that switch them off). Both keys end in a
``set_rewards`` command, which the engine applies through its gate at its
next safe point.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from rlab.engine.rewards.edit.stored import ExampleIndex, recent_groups

if TYPE_CHECKING:
    from textual.app import App

    from rlab.store.reader import StoreReader
    from rlab.tui.readers import LockedReader

    _Base = App  # to the type checker the mixin is the App it is mixed into
else:
    _Base = object


class RewardActions(_Base):
    """``e`` and ``u`` of :class:`tui.app.RolloutLabApp`, and what the reward
    editor calls back (:meth:`recent_groups`, :meth:`_apply_rewards`)."""

    # What the actions use of tui.app.RolloutLabApp, which sets them.
    run_id: int | None
    run_row: dict | None
    view_reader: LockedReader
    examples: ExampleIndex
    want_paused: bool
    read_in_worker: Callable[[Callable[[StoreReader], Any], Callable[[Any], None]], Any]
    send: Callable[..., Any]
    action_toggle_pause: Callable[[], None]

    def action_reward_editor(self) -> None:
        """``e``: edit the run's reward functions (RewardEditorScreen), starting
        from the version the run applies now (its latest stored version)."""
        reward_file, run_id = self._reward_file(), self.run_id
        if reward_file is None or run_id is None:
            self.notify("this run has no reward file recorded (config['reward_file'])",
                        severity="error")
            return
        self.read_in_worker(lambda reader: reader.reward_versions(run_id),
                            lambda versions: self._open_editor(reward_file, versions))

    def _open_editor(self, reward_file: Path, versions: list[dict]) -> None:
        # Imported here: the editor pulls in the engine's rubric checker
        # (numpy), which `rlab watch` should not pay for at start-up.
        from rlab.tui.reward_editor import RewardEditorScreen

        if not isinstance(self.screen, RewardEditorScreen):
            applied = versions[-1]["source"] if versions else None
            self.push_screen(RewardEditorScreen(reward_file, self.recent_groups,
                                                self._apply_rewards, applied_source=applied))

    def action_revert_rewards(self) -> None:
        """``u``: go back to the reward version before the current one, and resume if paused.

        The way back from an edit that hangs or raises during training (the
        engine pauses on it): the previous version goes through the same
        set_rewards path (and the engine's gate) as any edit.
        """
        run_id = self.run_id
        if run_id is None:
            return
        self.read_in_worker(lambda reader: reader.reward_versions(run_id), self._revert_to_previous)

    def _revert_to_previous(self, versions: list[dict]) -> None:
        if len(versions) < 2:
            self.notify("no earlier reward version to go back to", severity="warning")
            return
        previous = versions[-2]
        self.send("set_rewards", {"source": previous["source"], "weights": previous["weights"]})
        self.notify(f"going back to reward version {previous['version']} (applied as version "
                    f"{versions[-1]['version'] + 1})")
        if self.want_paused:
            self.action_toggle_pause()

    def _reward_file(self) -> Path | None:
        run = self.run_row or {}
        path = (run.get("config") or {}).get("reward_file") or run.get("reward_file")
        return Path(path) if path else None

    def _apply_rewards(self, source: str, weights: dict) -> None:
        self.send("set_rewards", {"source": source, "weights": weights})

    def recent_groups(self, k: int) -> list[dict]:
        """The last ``k`` groups of the run for the reward editor's preview
        (:func:`engine.rewards.edit.stored.recent_groups`, with the app's example
        index); ``[]`` before a run is known. Runs queries: call it off the UI thread."""
        if self.run_id is None:
            return []
        with self.view_reader as reader:
            return recent_groups(reader, self.run_id, k, self.examples)
