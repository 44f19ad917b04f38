"""The reward editor: edit, check, dry-run and apply a run's reward file.

``e`` in the app pushes :class:`RewardEditorScreen`. Saving (``ctrl+s``), or
saving the file in any other editor (the file is polled every 0.5 s), starts
a check in a worker thread: the new version is validated in a separate,
time-limited process (``engine.rewards.edit.check.check_edit``) and, when valid,
dry-run on the run's last K groups next to the applied version. Nothing
changes until the user applies it (``ctrl+o``); the engine then switches at
its next step boundary. ``ctrl+r`` discards the edit by writing the applied
version back to the file. Weights are edited in their own inputs; ``enter``
rewrites ``WEIGHTS`` in the file and goes through the same check. ``escape``
goes back (from inside the text area: twice, the first leaves the text area).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Label, Static, TextArea

from rlab.engine.rewards.edit.check import DEFAULT_TIMEOUT_S, ValidationResult, check_edit
from rlab.engine.rewards.edit.compare import DryRunReport
from rlab.engine.rewards.rubric_errors import RubricError
from rlab.engine.rewards.signatures import STYLE_TAGS, styles_in_source
from rlab.engine.rewards.weights_source import literal_weights, replace_weights

#: How often the reward file is polled for outside edits, in seconds.
POLL_S = 0.5
#: Groups dry-run by default (the run's last K groups).
DEFAULT_K = 8

GroupsProvider = Callable[[int], list[dict[str, Any]]]
ApplyCallback = Callable[[str, dict[str, float]], None]


def source_weights(source: str) -> dict[str, float]:
    """Every reward function of a file with its weight, read without running it:
    WEIGHTS' entries, then each public function of a reward signature that
    WEIGHTS leaves out at 1.0, as the rubric loads it (a verifiers-style
    ``brevity`` not named in WEIGHTS is still scored)."""
    named = literal_weights(source) or {}
    return {**named, **{name: 1.0 for name in styles_in_source(source) if name not in named}}


class RewardEditorScreen(Screen):
    """Edit the run's reward file, see the check and the dry run, apply or discard.

    Args:
        path: the run's reward file (read and written as utf-8); when it does
            not exist the editor starts from ``applied_source``.
        groups_provider: ``k -> [{"trajectories": [{"example": dict,
            "completion": str, "reward": float}]}]``, the run's last k
            groups; called from a worker thread.
        on_apply: called on the UI thread with (source, weights) when the
            user applies a checked version, e.g. to send the engine a
            ``set_rewards`` command.
        applied_source: the version the run uses now (default: the file as
            it is when the screen opens); the dry run compares against it
            and ``ctrl+r`` restores it.
        k: how many recent groups to dry-run.
        timeout_s: per-call and import limit of the check, seconds.

    Attributes:
        applied_source: the version last applied (or given).
        last_result / last_report: the latest check's outcome (None before).
        status_text: the status panel's text (what the user reads).
    """

    DEFAULT_CSS = """
    RewardEditorScreen #re-body { height: 1fr; }
    RewardEditorScreen #re-source { width: 3fr; }
    RewardEditorScreen #re-side { width: 2fr; min-width: 50; }
    RewardEditorScreen #re-status { padding: 0 1; border: round $primary-darken-2; height: auto; max-height: 12; }
    RewardEditorScreen #re-weights { height: auto; border: round $primary-darken-2; padding: 0 1; }
    RewardEditorScreen .re-weight { height: 3; }
    RewardEditorScreen .re-weight Label { width: 1fr; padding: 1 0; }
    RewardEditorScreen .re-weight Input { width: 16; }
    RewardEditorScreen #re-groups { height: auto; max-height: 14; border: round $primary-darken-2; }
    RewardEditorScreen #re-totals { padding: 0 1; border: round $primary-darken-2; height: auto; }
    """

    AUTO_FOCUS = "#re-source"  # typing edits the file; unfocused, letters are the app's keys (space pauses)
    BINDINGS = [
        Binding("ctrl+s", "save", "Save + check", priority=True),
        Binding("ctrl+o", "apply", "Apply", priority=True),
        Binding("ctrl+r", "discard", "Discard edit", priority=True),
        Binding("escape", "back", "Back"),
    ]

    def __init__(
        self,
        path: str | Path,
        groups_provider: GroupsProvider,
        on_apply: ApplyCallback,
        *,
        applied_source: str | None = None,
        k: int = DEFAULT_K,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ):
        super().__init__()
        self.path = Path(path)
        self._groups_provider = groups_provider
        self._on_apply = on_apply
        self.k = k
        self.timeout_s = timeout_s
        try:
            self._disk_text: str | None = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:  # e.g. a run file copied from another machine
            self._disk_text = None
        self._disk_stamp = self._stamp()
        self.applied_source = applied_source if applied_source is not None else (self._disk_text or "")
        self._checking: str | None = None  # source of the check in flight
        self._candidate: tuple[str, dict[str, float]] | None = None  # checked, not applied
        self.last_result: ValidationResult | None = None
        self.last_report: DryRunReport | None = None
        self.status_text = f"Editing {self.path.name}. ctrl+s saves and checks it; outside edits are checked too."
        if self._disk_text is None:
            self.status_text = f"{self.path} does not exist here; ctrl+s writes the editor's text to it."

    # -- layout ---------------------------------------------------------------

    def compose(self) -> ComposeResult:
        with Horizontal(id="re-body"):
            text = self.applied_source if self._disk_text is None else self._disk_text
            yield TextArea.code_editor(text, language="python", id="re-source")
            with VerticalScroll(id="re-side"):
                yield Static(Text(self.status_text, style="dim"), id="re-status")
                yield Vertical(id="re-weights")
                yield DataTable(id="re-groups", cursor_type="row", zebra_stripes=True)
                yield Static("", id="re-totals")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#re-source", TextArea).border_title = str(self.path)
        self.query_one("#re-weights").border_title = "weights (enter applies to the file)"
        table = self.query_one("#re-groups", DataTable)
        table.border_title = f"dry run: last {self.k} groups"
        table.add_columns("group", "old mean", "new mean", "tau", "ranking", "best")
        self._show_weights(source_weights(self.query_one("#re-source", TextArea).text))
        self.set_interval(POLL_S, self._poll_file)

    def _show_weights(self, weights: dict[str, float]) -> None:
        """Rebuild the weight inputs when the rubric's function names change."""
        box = self.query_one("#re-weights", Vertical)
        inputs = self.weight_inputs()
        if [field.name for field in inputs] == list(weights):
            for field in inputs:
                field.value = f"{weights[field.name]:g}"
            return
        box.remove_children()
        if not weights:
            box.mount(Label("WEIGHTS is not a literal dict; edit it in the file"))
            return
        # the detected signature style, for functions not in the lab's own form (TRL, verifiers)
        styles = styles_in_source(self.query_one("#re-source", TextArea).text)
        labels = {n: n if styles.get(n, "lab") == "lab" else f"{n} ({STYLE_TAGS[styles[n]]})" for n in weights}
        # no ids: rows are rebuilt while the old ones are still being removed
        box.mount_all(
            Horizontal(Label(labels[name]), Input(f"{value:g}", name=name, type="number"), classes="re-weight")
            for name, value in weights.items()
        )

    def weight_inputs(self) -> list[Input]:
        """The weight inputs, one per rubric function (``Input.name`` is the function)."""
        return list(self.query(".re-weight Input").results(Input))

    # -- status ---------------------------------------------------------------

    def _status(self, text: str, style: str = "") -> None:
        self.status_text = text
        self.query_one("#re-status", Static).update(Text(text, style=style))

    # -- saving, watching, checking ---------------------------------------------

    def _stamp(self) -> tuple[int, int] | None:
        try:
            info = self.path.stat()
        except FileNotFoundError:
            return None
        return info.st_mtime_ns, info.st_size

    def _write(self, text: str) -> None:
        self.path.write_text(text, encoding="utf-8")
        self._disk_text, self._disk_stamp = text, self._stamp()

    def action_save(self) -> None:
        """``ctrl+s``: write the editor to the file and check it."""
        text = self.query_one("#re-source", TextArea).text
        self._write(text)
        self._start_check(text)

    def _poll_file(self) -> None:
        """Pick up saves from outside editors (mtime or size changed)."""
        stamp = self._stamp()
        if stamp is None or stamp == self._disk_stamp:
            return
        self._disk_stamp = stamp
        text = self.path.read_text(encoding="utf-8")
        if text == self._disk_text:
            return
        self._disk_text = text
        editor = self.query_one("#re-source", TextArea)
        if editor.text != text:
            editor.load_text(text)
            self.notify(f"{self.path.name} changed on disk; loaded it into the editor")
        self._start_check(text)

    def _start_check(self, source: str) -> None:
        self._checking = source
        self._candidate = None
        self._status(f"checking {self.path.name}… (time limit {self.timeout_s:g} s per call)", "yellow")
        self._check(source)

    @work(thread=True, exclusive=True, group="reward-check")
    def _check(self, source: str) -> None:
        """Validate and dry-run off the UI thread (in one child process)."""
        try:
            groups = self._groups_provider(self.k)
        except Exception as exc:  # noqa: BLE001 - show any store problem, keep the editor usable
            groups = []
            self.app.call_from_thread(self.notify, f"could not read recent groups: {exc}", severity="warning")
        try:
            result, report = check_edit(self.applied_source, source, groups, self.timeout_s, filename=self.path.name)
        except ValueError as exc:  # groups the check cannot use (malformed, not JSON)
            result = ValidationResult(ok=False, kind="crash", message=f"the stored groups cannot be checked: {exc}")
        self.app.call_from_thread(self._show_check, source, result, report)

    def _show_check(self, source: str, result: ValidationResult, report: DryRunReport | None) -> None:
        if source != self._checking:
            return  # an older check finishing after a newer save
        self._checking = None
        self.last_result, self.last_report = result, report
        self._show_report(report)
        if not result.ok:
            self._candidate = None
            self._status(f"✗ not applied: {result.message}", "bold red")
            editor = self.query_one("#re-source", TextArea)
            if result.lineno and editor.text == source:
                editor.cursor_location = (result.lineno - 1, 0)
            return
        self._candidate = (source, dict(result.weights))
        self._show_weights(result.weights)
        if source == self.applied_source:
            self._status(f"✓ {self.path.name} is valid and is the applied version", "green")
        else:
            more = "" if report else " (no groups stored yet: nothing to dry-run)"
            self._status(f"✓ {result.message}{more}\nctrl+o applies it at the next step, ctrl+r discards it", "green")

    def _show_report(self, report: DryRunReport | None) -> None:
        table = self.query_one("#re-groups", DataTable)
        table.clear()
        totals = self.query_one("#re-totals", Static)
        if report is None:
            totals.update("")
            return
        for g in report.groups:
            table.add_row(
                str(g.index),
                f"{g.old_mean:.3f}",
                f"{g.new_mean:.3f}",
                "n/a" if g.tau is None else f"{g.tau:+.2f}",
                "changed" if g.ranking_changed else "same",
                "changed" if g.best_changed else "same",
            )
        totals.update(_totals_text(report))

    # -- apply, discard, weights ------------------------------------------------

    def action_apply(self) -> None:
        """``ctrl+o``: hand the checked version to ``on_apply``."""
        editor = self.query_one("#re-source", TextArea)
        if self._candidate is None:
            self.notify("nothing checked to apply: save with ctrl+s and wait for a ✓", severity="warning")
            return
        source, weights = self._candidate
        if editor.text != source:
            self.notify("the editor changed since the check: save with ctrl+s first", severity="warning")
            return
        try:
            self._on_apply(source, weights)
        except Exception as exc:  # noqa: BLE001 - e.g. the run file is locked; keep the edit to retry
            self._status(f"✗ could not apply: {exc}; ctrl+o retries", "bold red")
            return
        self.applied_source, self._candidate = source, None
        self._status("✓ applied: the run switches to this version at its next step boundary", "bold green")

    def action_discard(self) -> None:
        """``ctrl+r``: write the applied version back to the file and the editor."""
        self.workers.cancel_group(self, "reward-check")
        self._checking = self._candidate = None
        self._write(self.applied_source)
        self.query_one("#re-source", TextArea).load_text(self.applied_source)
        self._show_report(None)
        self._show_weights(source_weights(self.applied_source))
        self._status("edit discarded: the file holds the applied version again", "yellow")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """``enter`` in a weight: rewrite WEIGHTS in the file, then check."""
        if event.input not in self.weight_inputs():
            return
        weights = {}
        for field in self.weight_inputs():
            name = field.name
            try:
                weights[name] = float(field.value)
            except ValueError:
                weights[name] = math.nan
            if not math.isfinite(weights[name]):
                self._status(f"✗ weight for {name} must be a finite number, got {field.value!r}", "bold red")
                return
        editor = self.query_one("#re-source", TextArea)
        try:
            editor.load_text(replace_weights(editor.text, weights))
        except RubricError as exc:
            self._status(f"✗ {exc}", "bold red")
            return
        self.action_save()

    def action_back(self) -> None:
        """``escape``: leave the editor; the file keeps what was saved."""
        if self._disk_text != self.applied_source:
            self.notify(f"{self.path.name} holds an edit that is not applied; `e` then ctrl+r discards it")
        self.app.pop_screen()


def _totals_text(report: DryRunReport) -> Text:
    """Overall figures and the two reward histograms, as text."""
    n = len(report.groups)
    tau = "n/a" if report.mean_tau is None else f"{report.mean_tau:+.2f}"
    text = Text()
    text.append(f"mean reward  old {report.old_mean:.3f}  →  new {report.new_mean:.3f}\n", style="bold")
    text.append(f"groups whose ranking changes: {report.groups_ranking_changed}/{n}   mean tau {tau}\n")
    if report.new_errors:
        text.append(f"new version errored on {report.new_errors} trajectories: {report.first_error}\n", style="red")
    widest = max([*report.old_counts, *report.new_counts, 1])
    text.append("rewards from      old            new", style="dim")
    for k, (old, new) in enumerate(zip(report.old_counts, report.new_counts)):
        low = report.bin_edges[k]
        text.append(f"\n{low:>8.3f}  {_bar(old, widest)} {old:>3}  {_bar(new, widest)} {new:>3}")
    return text


def _bar(count: int, widest: int, width: int = 10) -> str:
    filled = round(width * count / widest)
    return "█" * filled + "·" * (width - filled)
