"""Modal dialogs: quit (stop or leave the run), help, trajectory search."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Footer, Input, Label, Markdown

from rlab.store.search import SEARCH_BUDGET_S, Found
from rlab.tui.view import VIEWS

HELP = """\
# Keys

| key | what it does |
|---|---|
| `space` | pause / resume the run (the engine pauses at its next safe point) |
| `n` | when paused: run exactly one more step, then pause again |
| `[` `]` | previous / next step |
| `end` | back to the newest step, following the run (the header says "following", or "at step N of M") |
| `←` `→` | previous / next group of the step |
| `↑` `↓` | previous / next trajectory of the group |
| `b` `w` | jump to the best / worst-rewarded trajectory of the group |
{views}| `s` | (group / advantages view) change the sort |
| `v` | (group view, after a reward edit) the group's ranking under two reward versions |
| `l` | (trajectory inspector) shade tokens by advantage, logprob or sampler mismatch |
| `/` | search trajectory text in this run |
| `m` | (dashboard) every step metric, filtered by name, with a plot of the highlighted one |
| `l` | (dashboard) the engine log's tail, followed live |
| `r` | runs in the file (`enter` watch, `x` mark, `c` compare reward curves and manifests, `p` pin as baseline: its curves dotted on the plots) |
| `e` | edit the reward functions of the run (keys type into the file; `escape` twice goes back) |
| `u` | undo the last reward edit: back to the previous version (and resume) |
| `f` | fork the run from its checkpoint at or before the cursor's step, with options changed (`rlab fork`): a new run beside it, its curves drawn with the parent's |
| `o` | change the run's settings from its next step: lr, temperature, beta, ... (`rlab set`) |
| `tab` | focus a table (arrows then move inside it, `enter` opens, `escape` leaves) |
| `enter` | (advantages view, table focused) highlight the row's anchor group |
| `escape` | back |
| `?` | this help (arrows and page keys scroll it) |
| `q` | quit (asks whether to stop the run or leave it running) |

Plots refresh at most twice a second. Vertical marks: magenta = reward-function
edit, orange = pause, cyan = the step a fork started from, yellow = a settings
change. A fork's parent is drawn dotted beside it (`· parent`). Alerts (reward-hacking watch) name the step that raised
them; `enter` on one opens its groups.
"""


def help_text() -> str:
    """:data:`HELP` with a row per registered view (``tui.view.VIEWS``), after the cursor keys."""
    rows = "".join(f"| `{v.key}` | {v.help} |\n" for v in VIEWS.values())
    return HELP.replace("{views}", rows)


class QuitScreen(ModalScreen[str]):
    """Ask whether quitting should stop the run; dismisses with
    ``"stop"``, ``"leave"`` or ``"cancel"``."""

    BINDINGS = [
        Binding("s", "choose('stop')", "Stop the run"),
        Binding("l", "choose('leave')", "Leave it running"),
        Binding("escape", "choose('cancel')", "Cancel"),
    ]
    AUTO_FOCUS = "#leave"

    def compose(self) -> ComposeResult:
        with Vertical(id="quit-box"):
            yield Label("The run is still going. Quit and…")
            with Horizontal():
                yield Button("Stop the run", id="stop", variant="error")
                yield Button("Leave it running", id="leave", variant="primary")
                yield Button("Cancel", id="cancel")
        yield Footer(compact=True)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        """A button: dismiss with its id (``stop``, ``leave`` or ``cancel``)."""
        self.dismiss(event.button.id)

    def action_choose(self, choice: str) -> None:
        """Dismiss with ``choice``."""
        self.dismiss(choice)


class HelpScreen(ModalScreen[None]):
    """The key bindings and what they do, in a box that scrolls (arrows, page keys,
    home/end, the mouse wheel) when the terminal is shorter than the list."""

    BINDINGS = [Binding("escape,question_mark", "app.pop_screen", "Close")]
    AUTO_FOCUS = "#help-box"

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Markdown(help_text())
        yield Footer(compact=True)


class SearchScreen(ModalScreen[None]):
    """``/``: find trajectories of the run whose completion or prompt contains a text.

    The query runs in a worker (``StoreReader.search``): the newest 100
    matches, read newest first for at most ``store.search.SEARCH_BUDGET_S``
    seconds; the title says whether it went through the file's text index or
    scanned, and how far back it read. ``enter`` in the box again on the same
    text reads further back and adds what it finds; ``enter`` on a match moves the cursor
    there and opens the trajectory inspector.
    """

    BINDINGS = [Binding("escape", "app.pop_screen", "Close")]
    AUTO_FOCUS = "#search-input"
    LIMIT = 100

    def compose(self) -> ComposeResult:
        with Vertical(id="search-box"):
            yield Input(placeholder="text in a completion or prompt, then enter", id="search-input")
            yield DataTable(id="search-results", cursor_type="row")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns("step", "group", "traj", "reward", "completion")
        self._rows: dict[str, dict] = {}
        self._text = ""
        self._last: Found | None = None

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in the box: search in a worker (on from where the last search of
        the same text stopped), show the matches when they come."""
        text = event.value.strip()
        if not text:
            return
        further = text == self._text and self._last is not None and self._last.continue_before is not None
        if not further:
            self._text, self._last, self._rows = text, None, {}
            self.query_one(DataTable).clear()
        before = self._last.continue_before if further and self._last else None
        run_id = self.app.run_id
        self.app.read_in_worker(lambda reader: reader.search(run_id, text, limit=self.LIMIT, before=before,
                                                             budget_s=SEARCH_BUDGET_S), self._show)

    def _show(self, found: Found) -> None:
        self._last = found
        table = self.query_one(DataTable)
        for r in found.rows:
            self._rows[str(r["id"])] = r
            table.add_row(r["step"], r["group_id"], r["idx"], f"{r['reward'] or 0:.2f}",
                          (r["completion"] or "").replace("\n", "⏎")[:80], key=str(r["id"]))
        how = ("through the text index" if found.indexed else
               "scanned: the text index cannot narrow text whose trigrams most completions hold"
               if found.index_timed_out else "scanned (`rlab index` builds a text index)")
        reach = ("every trajectory read" if found.continue_before is None else
                 f"read back to step {found.reached_step}: enter in the box reads further back")
        table.border_title = f"{len(self._rows)} matches (newest first) · {how} · {reach}"
        if found.rows:
            table.focus()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a match: move the cursor to it and open the trajectory inspector."""
        row = self._rows[event.row_key.value]
        self.app.pop_screen()
        self.app.go_to(row["step"], group_id=row["group_id"], traj_id=row["id"])
        self.app.action_open("trajectory")
