"""Advantages view (``a``): the GiGPO quantities of every turn of a group.

One row per (episode, turn): episode, t, short state key, anchor id and size,
r_t, R_t, A^E, A^S, A (GiGPO, Feng et al. 2025, arXiv 2505.10978, section 4;
see docs/architecture.md). ``enter`` on a row highlights every member of its anchor group
across episodes; ``s`` changes the sort. The plot shows, per step, the share
of turns whose anchor group has more than one member (the paper's section 5.5
statistic: how often step-level grouping has anything to compare).
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Header, Static
from textual_plotext import PlotextPlot

from rlab.engine.cli.formatting import clip, fmt
from rlab.tui.series import downsample
from rlab.tui.view import NavScreen, View

COLUMNS = ("episode", "t", "state", "anchor", "size", "r_t", "R_t", "A^E", "A^S", "A")
SORTS = {
    "episode, t": lambda r: (r["episode"], r["t"]),
    "anchor": lambda r: (str(r["anchor_id"]), r["episode"], r["t"]),
    "A": lambda r: -(r["advantage"] or 0.0),
    "A^S": lambda r: -(r["adv_step"] or 0.0),
    "R_t": lambda r: -(r["ret"] or 0.0),
}
"""Row orders offered by ``s`` (numbers: largest first)."""


def turn_rows(view: View) -> list[dict]:
    """Every turn of the view's group, with ``episode`` (trajectory index) and
    ``trajectory_id`` added, in episode then turn order."""
    if view.group is None:
        return []
    rows = []
    for traj in view.group["trajectories"]:
        for turn in view.turns.get(traj["id"], []):
            rows.append({**turn, "episode": traj["idx"], "trajectory_id": traj["id"]})
    return rows


def short_key(state_key: str | None, width: int = 14) -> str:
    """A state key cut to ``width`` characters for the table."""
    return clip("-" if state_key is None else str(state_key).replace("\n", " "), width)


def cells(row: dict, style: str) -> list[Text]:
    """The table cells of one turn row, all in ``style``."""
    values = [row["episode"], row["t"], short_key(row["state_key"]), row["anchor_id"],
              row["anchor_size"], fmt(row["reward"]), fmt(row["ret"]),
              fmt(row["adv_episode"], "+.3f"), fmt(row["adv_step"], "+.3f"),
              fmt(row["advantage"], "+.3f")]
    return [Text(str(v), style=style) for v in values]


class AdvantagesScreen(NavScreen):
    """Per-turn advantages of the cursor's group, sortable, with anchor highlighting."""

    VIEW_NAME = "advantages"
    BINDINGS = [Binding("escape", "app.pop_screen", "Back"),
                Binding("s", "cycle_sort", "Sort")]

    def __init__(self) -> None:
        super().__init__()
        self.sort = next(iter(SORTS))
        self.anchor: str | None = None
        self._view: View | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="adv-title")
        yield DataTable(id="adv-table", cursor_type="row", zebra_stripes=True)
        yield PlotextPlot(id="anchor-plot")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.query_one(DataTable).add_columns(*COLUMNS)
        run_id = self.app.run_id
        if run_id is not None:
            self.app.read_in_worker(lambda reader: reader.anchor_share_by_step(run_id), self._plot_share)

    def _plot_share(self, rows: list[dict]) -> None:
        """Draw share of turns in anchor groups of size > 1, per step."""
        plot = self.query_one("#anchor-plot", PlotextPlot)
        plt = plot.plt
        plt.clear_data()
        plt.title("share of turns whose anchor group has > 1 member (GiGPO 5.5)")
        if rows:
            xs, ys = downsample([r["step"] for r in rows], [r["share"] for r in rows],
                                max(plot.size.width - 12, 8))
            plt.plot(xs, ys, color="cyan", marker="braille")
            plt.ylim(0, 1)
        plot.refresh()

    def action_cycle_sort(self) -> None:
        """``s``: cycle the row order through :data:`SORTS`."""
        names = list(SORTS)
        self.sort = names[(names.index(self.sort) + 1) % len(names)]
        if self._view is not None:
            self.show_view(self._view)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter: highlight the selected row's anchor group (again: clear)."""
        anchor = event.row_key.value.split("|", 1)[1]
        self.anchor = None if anchor == self.anchor else anchor
        if self._view is not None:
            self.show_view(self._view)

    def show_view(self, view: View) -> None:
        self._view = view
        rows = sorted(turn_rows(view), key=SORTS[self.sort])
        table = self.query_one(DataTable)
        title = self.query_one("#adv-title", Static)
        if view.group is None:
            title.update("no group at this step")
            table.clear()
            return
        selected = view.group["trajectories"][view.cursor.traj_pos]["id"]
        title.update(
            f"step {view.cursor.step} · group {view.cursor.group_pos + 1}/{len(view.groups)} · "
            f"{len(rows)} turns · sorted by {self.sort}"
            + (f" · anchor {self.anchor} highlighted" if self.anchor else "")
            + ("" if rows else " · no per-turn data (single-turn run: see the group view)"))
        self.title = f"advantages · group #{view.group['id']}"
        cursor_row = table.cursor_row
        table.clear()
        for row in rows:
            style = ("bold black on yellow" if self.anchor == str(row["anchor_id"])
                     else "bold" if row["trajectory_id"] == selected else "")
            table.add_row(*cells(row, style), key=f"{row['id']}|{row['anchor_id']}")
        table.move_cursor(row=min(cursor_row, max(len(rows) - 1, 0)))
