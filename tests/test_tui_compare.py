"""The runs list's kind column and the compare screen (pilot): verdict first,
then the paired difference, then the flipped examples; enter opens one."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable, Static

from rlab.tui.app import RolloutLabApp
from rlab.engine.cli.main import main
from rlab.tui.compare import CompareScreen, PinnedTrajectoryScreen
from rlab.tui.runs import RunsScreen
from test_evaluation_loops import EVAL, frozen
from test_tui_app import SIZE, until


@pytest.fixture
def evals(tmp_path):
    """Three eval runs of frozen completions: A and B in one room, C scored by another rubric."""
    db = tmp_path / "r.db"
    lenient = tmp_path / "lenient.py"
    lenient.write_text("def correct(example, completion):  # lenient: every answer passes\n    return 1.0\n\n"
                       "WEIGHTS = {'correct': 1.0}\n")
    for name, right, extra in (("A", set(range(10)), []), ("B", set(range(3, 16)), []),
                               ("C", {1}, ["--rewards", str(lenient)])):
        assert main(["eval", "--completions", str(frozen(tmp_path / f"{name}.jsonl", right)), "--db", str(db),
                     "--name", name, "--json", *extra]) == 0
    return db


async def _compare(pilot, app, first: int, second: int) -> CompareScreen:
    await pilot.press("r")
    await until(pilot, lambda: isinstance(app.screen, RunsScreen))
    table = app.screen.query_one(DataTable)
    await until(pilot, lambda: table.row_count == 3)
    assert [str(table.get_row_at(i)[3]) for i in range(3)] == ["eval", "eval", "eval"]
    table.move_cursor(row=first)
    await pilot.press("x")
    table.move_cursor(row=second)
    await pilot.press("c")
    await until(pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.comparison is not None)
    return app.screen


async def test_same_room_shows_verdict_difference_and_flips_and_opens_one(evals):
    app = RolloutLabApp(evals, run_id=1)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _compare(pilot, app, 0, 1)
        assert "same room" in str(screen.query_one("#verdict", Static).render())
        paired = str(screen.query_one("#paired", Static).render())
        assert "A 50.0%  B 65.0%" in paired and "B - A = +15.0%" in paired and "McNemar exact p" in paired
        flips = screen.query_one("#flips", DataTable)
        assert flips.row_count == 9
        assert [str(c) for c in flips.get_row_at(0)] == [EVAL[0]["id"], "lost", "1.000", "0.000"]
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, PinnedTrajectoryScreen))
        shown = app.screen.pinned
        assert shown["example_id"] == EVAL[0]["id"] and shown["run_id"] == 2 and shown["reward"] == 0.0
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen))
        await pilot.press("o")
        await until(pilot, lambda: isinstance(app.screen, PinnedTrajectoryScreen))
        assert app.screen.pinned["run_id"] == 1 and app.screen.pinned["reward"] == 1.0


async def test_other_scorer_is_refused_until_forced(evals):
    app = RolloutLabApp(evals, run_id=1)
    async with app.run_test(size=SIZE) as pilot:
        screen = await _compare(pilot, app, 0, 2)
        verdict = str(screen.query_one("#verdict", Static).render())
        assert "not comparable" in verdict and "scorer.source_sha256" in verdict
        paired = screen.query_one("#paired", Static)
        assert "numbers hidden" in str(paired.render())
        assert not screen.query_one("#flips", DataTable).display
        await pilot.press("f")
        await until(pilot, lambda: "FORCED" in str(paired.render()))
        assert "B - A" in str(paired.render())


async def test_two_training_runs_of_one_file_show_both_held_out_curves(tmp_path):
    """GiGPO and GRPO runs (as tests/bench/multistep.py writes them) side by side."""
    from rlab.store.writer import StoreWriter
    from fixtures.smalldb import MANIFEST

    db = tmp_path / "curves.db"
    with StoreWriter(db) as w:
        for name, slope in (("maze-gigpo-s0", 0.02), ("maze-grpo-s0", 0.01)):
            run = w.start_run(name, "maze", {"seed": 0}, MANIFEST)
            for step in range(0, 31):
                metrics = {"reward": 0.3 + slope * step, "reward_std": 0.1, "step_seconds": 1.0}
                if step % 10 == 0:
                    metrics["eval/pass_at_1"] = 0.2 + slope * step
                w.write_step(run, step, metrics)
            w.set_status(run, "finished")
    app = RolloutLabApp(db, run_id=1)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen))
        table = app.screen.query_one(DataTable)
        await until(pilot, lambda: table.row_count == 2)
        table.move_cursor(row=0)
        await pilot.press("x")
        table.move_cursor(row=1)
        await pilot.press("c")
        # two training runs compare by their held-out evals, as `rlab compare` pairs them (issue 59)
        await until(pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.branches is not None)
        screen = app.screen
        assert "one held-out room" in str(screen.query_one("#verdict", Static).render())
        assert screen.plotted == {"maze-gigpo-s0": 4, "maze-grpo-s0": 4}
