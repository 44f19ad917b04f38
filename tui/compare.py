"""The compare screen: locked-room verdict, paired difference, flipped examples.

Reading order follows the measurement-first rule: first whether the two runs
may be compared at all (the manifest fields that differ, with both values),
then the paired difference in pass@1 with its bootstrap interval and
McNemar's p-value, then the examples that flipped (enter opens run B's
trajectory, ``o`` run A's). When the manifests differ the numbers stay
hidden until ``f`` asks for them, under a banner. Training runs also get
their reward curves and held-out pass@1 curves (e.g. GiGPO and GRPO runs
of tests/bench/multistep.py, side by side). A fork and its parent are two
branches of one run: they are compared at the steps after the fork both
evaluated (``engine.evaluation.branches``, as ``rlab compare PARENT FORK``),
one table row per matched step, the fork step marked on the curves.
"""

from __future__ import annotations

import json

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static
from textual_plotext import PlotextPlot

from rlab.engine.evaluation.branches import BranchComparison, both_trained, compare_branches
from rlab.engine.evaluation.compare import Comparison, compare_runs
from rlab.engine.cli.formatting import fmt
from rlab.tui.inspector import TrajectoryScreen
from rlab.tui.series import downsample
from rlab.tui.view import Cursor, View


def verdict_text(comparison: Comparison) -> Text:
    """The locked-room verdict: same room, or each differing field with both values."""
    a, b = comparison.run_a["name"], comparison.run_b["name"]
    if comparison.comparable:
        return Text(f"✓ same room: A {a} and B {b} agree on dataset, prompt, scorer, sampling and split",
                    style="bold green")
    text = Text(f"✗ not comparable: {len(comparison.differences)} locked field(s) differ "
                f"(A {a}, B {b})\n", style="bold red")
    for diff in comparison.differences:
        text.append(f"  {diff.field}: ", style="bold")
        text.append(f"A {json.dumps(diff.a)}  ·  B {json.dumps(diff.b)}\n")
    return text


def paired_text(comparison: Comparison) -> Text:
    """The paired numbers, under a banner when forced; or why there are none."""
    text = Text()
    if comparison.differences:
        if not comparison.forced:
            return Text("numbers hidden: these runs are different experiments. f: show them anyway",
                        style="yellow")
        text.append("⚠ FORCED: different experiments, these numbers are not evidence of a change\n",
                    style="bold black on yellow")
    paired = comparison.paired
    if paired is None:
        return text.append(comparison.reason or "no paired results", style="yellow")
    p = fmt(paired.mcnemar_p, ".4g")
    text.append(f"pass@1  A {paired.pass_at_1_a:.1%}  B {paired.pass_at_1_b:.1%}  over {paired.n} "
                "paired examples\n", style="bold")
    text.append(f"B - A = {paired.difference:+.1%}   95 % paired bootstrap "
                f"[{paired.interval.low:+.1%}, {paired.interval.high:+.1%}]   "
                f"McNemar exact p = {p}   (gained {paired.gained}, lost {paired.lost})")
    if paired.unpaired:
        text.append(f"\n{paired.unpaired} examples measured by one run only are left out", style="dim")
    return text


def branch_verdict(comparison: BranchComparison) -> Text:
    """Whether two training runs' held-out evals (a fork's and its parent's, two arms') are in one room."""
    a, b = comparison.run_a["name"], comparison.run_b["name"]
    if comparison.comparable:
        return Text(f"✓ two training runs, one held-out room: A {a} and B {b} evaluate the same split, prompt "
                    f"and success rule (matched at the steps after {comparison.from_step})", style="bold green")
    return Text("✗ the branches' held-out evals differ: " + "; ".join(
        f"{d.field}: A {json.dumps(d.a)} · B {json.dumps(d.b)}" for d in comparison.differences), style="bold red")


def pooled_text(comparison: BranchComparison) -> Text:
    """The matched steps pooled (each example's pass rate over them), or why there are no numbers."""
    if comparison.interval is None or comparison.pooled_a is None or comparison.pooled_b is None:
        return Text(comparison.reason or "no matched steps yet", style="yellow")
    interval = comparison.interval
    return Text(f"over {len(comparison.steps)} matched steps: A {comparison.pooled_a:.1%}  B "
                f"{comparison.pooled_b:.1%}  B - A = {comparison.pooled_b - comparison.pooled_a:+.1%}  95 % paired "
                f"bootstrap [{interval.low:+.1%}, {interval.high:+.1%}]", style="bold")


class PinnedTrajectoryScreen(TrajectoryScreen):
    """The trajectory inspector on one stored trajectory, outside the
    dashboard's cursor (the compare screen's runs need not be the watched one)."""

    def __init__(self, trajectory: dict) -> None:
        super().__init__()
        self.pinned = trajectory

    def on_mount(self) -> None:
        super().on_mount()
        TrajectoryScreen.show_view(self, View(Cursor(self.pinned["step"]), trajectory=self.pinned))

    def show_view(self, view: View) -> None:
        """The dashboard cursor moved: this screen keeps its trajectory."""


class CompareScreen(Screen):
    """Two runs of the file side by side under the locked-room rule."""

    BINDINGS = [Binding("escape", "app.pop_screen", "Back"),
                Binding("f", "force", "Show numbers anyway"),
                Binding("o", "open('a')", "Open A's trajectory")]
    AUTO_FOCUS = "#flips"

    def __init__(self, run_a: int, run_b: int) -> None:
        super().__init__()
        self.run_ids = (run_a, run_b)
        self.comparison: Comparison | None = None
        self.branches: BranchComparison | None = None
        #: run name -> held-out points plotted (what the curves show, for tests)
        self.plotted: dict[str, int] = {}

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="verdict")
        yield Static("", id="paired")
        yield DataTable(id="flips", cursor_type="row", zebra_stripes=True)
        yield PlotextPlot(id="compare-plot")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.title = "compare runs A and B"  # named in full below: a header cuts long names
        self.query_one("#flips", DataTable).add_columns("example", "flip", "reward A", "reward B")
        self.query_one("#flips").border_title = "flipped examples (enter: B's trajectory, o: A's)"
        self._load(force=False)

    def _load(self, force: bool) -> None:
        a, b = self.run_ids

        def load(reader):
            rows = [reader.run(i) for i in (a, b)]
            branches = None not in rows and both_trained(*rows)
            comparison = (compare_branches(reader, a, b, force=force) if branches
                          else compare_runs(reader, a, b, force=force))
            return comparison, [reader.step_series(i) for i in (a, b)]

        self.app.read_in_worker(load, self._show)

    def action_force(self) -> None:
        """``f``: show the numbers of runs whose manifests differ, under a banner."""
        shown = self.comparison or self.branches
        if shown is not None and shown.differences and not (self.comparison and self.comparison.forced):
            self._load(force=True)

    def _show(self, loaded: tuple[Comparison | BranchComparison, list[list[dict]]]) -> None:
        comparison, series = loaded
        if isinstance(comparison, BranchComparison):
            self._show_branches(comparison, series)
            return
        self.comparison = comparison
        self.query_one("#verdict", Static).update(verdict_text(comparison))
        self.query_one("#paired", Static).update(paired_text(comparison))
        table = self.query_one("#flips", DataTable)
        table.clear()
        for flip in comparison.paired.flips if comparison.paired else []:
            table.add_row(str(flip.example_id), flip.direction, fmt(flip.reward_a, ".3f"), fmt(flip.reward_b, ".3f"))
        table.display = table.row_count > 0
        self._plot(comparison, series)

    def _show_branches(self, comparison: BranchComparison, series: list[list[dict]]) -> None:
        """Two training runs (a fork and its parent, two arms): the held-out room, a row per matched
        step, the curves."""
        self.branches = comparison
        self.query_one("#verdict", Static).update(branch_verdict(comparison))
        self.query_one("#paired", Static).update(pooled_text(comparison))
        table = self.query_one("#flips", DataTable)
        table.clear(columns=True)
        table.add_columns("step", "n", "pass@1 A", "pass@1 B", "B - A", "McNemar p")
        table.border_title = f"held-out pass@1 at the steps after {comparison.from_step} both evaluated"
        for m in comparison.steps:
            table.add_row(str(m.step), str(m.n), fmt(m.pass_at_1_a, ".1%"), fmt(m.pass_at_1_b, ".1%"),
                          f"{m.difference:+.1%}", fmt(m.mcnemar_p, ".3g"))
        table.display = table.row_count > 0
        self._plot(comparison, series, fork_at=comparison.from_step)

    def _plot(self, comparison: Comparison | BranchComparison, series: list[list[dict]],
              fork_at: int | None = None) -> None:
        plot = self.query_one(PlotextPlot)
        trained = [run.get("kind", "train") == "train" for run in (comparison.run_a, comparison.run_b)]
        plot.display = any(trained)
        if not plot.display:
            return
        plt = plot.plt
        plt.clear_data()
        plt.title("reward (mean) per step · held-out pass@1 (o)")
        width = max(plot.size.width - 12, 8)
        for run, rows, color in ((comparison.run_a, series[0], "cyan"), (comparison.run_b, series[1], "magenta")):
            pts = [(r["step"], r["reward"]) for r in rows if r["reward"] is not None]
            if pts:
                xs, ys = downsample([p[0] for p in pts], [p[1] for p in pts], width)
                plt.plot(xs, ys, label=run["name"], color=color, marker="braille")
            held_out = [(r["step"], r["eval/pass_at_1"]) for r in rows if r.get("eval/pass_at_1") is not None]
            if held_out:
                plt.plot([p[0] for p in held_out], [p[1] for p in held_out], label=f"{run['name']} held-out",
                         color=color, marker="o")
        if fork_at is not None:
            plt.vline(fork_at, "white")
        self.plotted = {run["name"]: len([r for r in rows if r.get("eval/pass_at_1") is not None])
                        for run, rows in zip((comparison.run_a, comparison.run_b), series)}
        plot.refresh()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a flipped example: run B's trajectory on it (two branches: no trajectories)."""
        if self.branches is None:
            self.action_open("b")

    def action_open(self, which: str) -> None:
        """Open run A's or B's trajectory of the highlighted flipped example."""
        flips = self.comparison.paired.flips if self.comparison and self.comparison.paired else []
        table = self.query_one("#flips", DataTable)
        if not flips or not 0 <= table.cursor_row < len(flips):
            return
        flip = flips[table.cursor_row]
        trajectory_id = flip.trajectory_a if which == "a" else flip.trajectory_b
        self.app.read_in_worker(lambda reader: reader.trajectory(trajectory_id),
                                lambda traj: traj and self.app.push_screen(PinnedTrajectoryScreen(traj)))
