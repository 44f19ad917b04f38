"""Runs list (``r``): every run of the file with its kind (train / eval /
select), each fork under its parent (the run tree); mark one and compare it
with another (:mod:`tui.compare`)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from rlab.tui.compare import CompareScreen
from rlab.tui.dashboard import DashboardScreen
from rlab.engine.cli.formatting import fmt, run_tree, tree_name


class RunsScreen(Screen):
    """The runs in the file: kind, status, scenario, steps, final pass@1.

    ``enter`` watches the highlighted run; ``x`` marks a run (``m`` is the
    dashboard's metrics key); ``c`` compares the marked run with the
    highlighted one.
    """

    BINDINGS = [Binding("escape", "app.pop_screen", "Back"),
                Binding("x", "mark", "Mark"),
                Binding("c", "compare", "Compare with mark"),
                Binding("p", "pin", "Pin baseline")]
    AUTO_FOCUS = "#runs-table"

    def __init__(self) -> None:
        super().__init__()
        self.marked: int | None = None
        self._runs: list[dict] = []

    def compose(self) -> ComposeResult:
        yield Header()
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)
        yield Static("enter: watch · x: mark · c: compare the marked run with this one · "
                     "p: pin as the dashboard's baseline (again: unpin)",
                     id="runs-hint")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.title = "runs"
        self.query_one(DataTable).add_columns("", "id", "name", "kind", "status", "scenario",
                                              "steps", "final pass@1")
        self.app.read_in_worker(lambda reader: reader.runs(), self._fill)

    def _fill(self, runs: list[dict]) -> None:
        tree = run_tree(runs)
        self._runs = [run for run, _ in tree]
        table = self.query_one(DataTable)
        table.clear()
        for run, depth in tree:
            table.add_row("*" if run["id"] == self.marked else "", run["id"], tree_name(run, depth),
                          run["kind"], run["status"].upper(), run["scenario"], run["steps"],
                          fmt(run["final_pass_at_1"]), key=str(run["id"]))
        if runs and self.marked is None:
            table.move_cursor(row=len(runs) - 1)

    def _highlighted(self) -> int | None:
        table = self.query_one(DataTable)
        if not self._runs:
            return None
        return self._runs[table.cursor_row]["id"]

    def action_mark(self) -> None:
        """``m``: mark the highlighted run for comparison."""
        self.marked = self._highlighted()
        row = self.query_one(DataTable).cursor_row
        self._fill(self._runs)
        self.query_one(DataTable).move_cursor(row=row)

    def action_compare(self) -> None:
        """``c``: compare the marked run with the highlighted one."""
        other = self._highlighted()
        if self.marked is None or other is None or other == self.marked:
            self.notify("mark a run with x, move to another run, then press c", severity="warning")
            return
        self.app.push_screen(CompareScreen(self.marked, other))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter: watch that run on the dashboard."""
        self.app.switch_run(int(event.row_key.value))
        self.app.pop_screen()

    def action_pin(self) -> None:
        """``p``: overlay the highlighted run's curves on the dashboard (tui.baseline)."""
        run_id = self._highlighted()
        for screen in self.app.screen_stack:
            if isinstance(screen, DashboardScreen):
                screen.pin_baseline(run_id)
