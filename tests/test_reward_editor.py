"""tui.reward_editor: bad edits change nothing; a good edit is dry-run and applied."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.app import App
from textual.widgets import DataTable, TextArea

from rlab.tui.reward_editor import RewardEditorScreen

ARITHMETIC = (Path(__file__).resolve().parents[1] / "scenarios" / "arithmetic" / "rewards.py").read_text()
REWARD_LINE = '"reward": 1.0 if ok else 0.0'
PARTIAL = ARITHMETIC.replace(REWARD_LINE, '"reward": 1.0 if ok else (0.5 if parsed is not None else 0.0)')
EXAMPLE = {"id": "e1", "prompt": "What is 2 + 3?", "answer": 5}
COMPLETIONS = [["5", "7", "x", "x"], ["5", "5", "x", ""], ["x", "7", "7", "x"]]


def recent_groups(k: int) -> list[dict]:
    """Three stored groups as the store reader hands them over."""
    return [
        {"trajectories": [{"example": EXAMPLE, "completion": c, "reward": float(c == "5")} for c in group]}
        for group in COMPLETIONS[:k]
    ]


def line_of(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


class Host(App):
    """A bare app that shows only the editor screen."""

    def __init__(self, screen: RewardEditorScreen):
        super().__init__()
        self.editor_screen = screen

    def on_mount(self) -> None:
        self.push_screen(self.editor_screen)


@pytest.fixture
def editor(tmp_path):
    path = tmp_path / "rewards.py"
    path.write_text(ARITHMETIC)
    applied: list[tuple[str, dict]] = []
    screen = RewardEditorScreen(path, recent_groups, lambda s, w: applied.append((s, w)), k=3, timeout_s=1.0)
    return path, screen, applied


async def finish_check(pilot) -> None:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


async def save(pilot, screen: RewardEditorScreen, source: str) -> None:
    screen.query_one(TextArea).load_text(source)
    await pilot.press("ctrl+s")
    await finish_check(pilot)


def bad_edits():
    syntax = ARITHMETIC.replace("text = completion.strip()", "text = completion.strip(")
    raising = ARITHMETIC.replace("    text = completion.strip()", "    text = completion.strip()\n    raise KeyError('boom')")
    hang = ARITHMETIC.replace("    text = completion.strip()", "    while True:\n        pass")
    def_line = line_of(ARITHMETIC, "def correct(")
    return [
        ("syntax", syntax, {line_of(syntax, "strip(")}, "SyntaxError"),
        ("import", "import not_a_module_xyz\n" + ARITHMETIC, {1}, "No module named 'not_a_module_xyz'"),
        ("raises", raising, {line_of(raising, "raise KeyError")}, "KeyError: 'boom'"),
        ("abc", ARITHMETIC.replace(REWARD_LINE, '"reward": "abc"'), {def_line}, "'abc' (a str, not a number)"),
        ("nan", ARITHMETIC.replace(REWARD_LINE, '"reward": float("nan")'), {def_line}, "nan (not finite)"),
        ("hang", hang, {line_of(hang, "while True"), line_of(hang, "pass")}, "TimeoutError: no answer after 1 s"),
    ]


@pytest.mark.parametrize("name, source, lines, text", bad_edits(), ids=[e[0] for e in bad_edits()])
async def test_bad_edit_shows_message_with_line_and_changes_nothing(editor, name, source, lines, text):
    path, screen, applied = editor
    async with Host(screen).run_test(size=(160, 48)) as pilot:
        await save(pilot, screen, source)
        assert screen.status_text.startswith("✗ not applied")
        assert text in screen.status_text
        assert screen.last_result.lineno in lines
        assert f"line {screen.last_result.lineno}" in screen.status_text
        assert screen.query_one(TextArea).cursor_location == (screen.last_result.lineno - 1, 0)
        await pilot.press("ctrl+o")  # apply is refused
        assert applied == []
        assert screen.applied_source == ARITHMETIC
        assert screen.query_one(DataTable).row_count == 0
        await pilot.press("ctrl+r")  # discard restores the applied version on disk
        assert path.read_text() == ARITHMETIC


async def test_good_edit_shows_dry_run_and_applies(editor):
    path, screen, applied = editor
    async with Host(screen).run_test(size=(160, 48)) as pilot:
        await save(pilot, screen, PARTIAL)
        assert screen.status_text.startswith("✓"), screen.status_text
        assert path.read_text() == PARTIAL
        table = screen.query_one(DataTable)
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert rows == [
            ["0", "0.250", "0.375", "+0.77", "changed", "same"],
            ["1", "0.500", "0.500", "+1.00", "same", "same"],
            ["2", "0.000", "0.250", "n/a", "changed", "changed"],
        ]
        report = screen.last_report
        assert report.groups_ranking_changed == 2
        assert (report.old_mean, report.new_mean) == pytest.approx((0.25, 0.375))
        assert applied == []  # nothing changes before the user applies
        await pilot.press("ctrl+o")
        assert applied == [(PARTIAL, {"correct": 1.0})]
        assert screen.applied_source == PARTIAL
        assert "next step boundary" in screen.status_text


async def test_outside_save_is_picked_up_and_checked(editor):
    path, screen, applied = editor
    async with Host(screen).run_test(size=(160, 48)) as pilot:
        broken = ARITHMETIC.replace(REWARD_LINE, '"reward": "abc"')
        path.write_text(broken)
        for _ in range(20):  # the file is polled every 0.5 s
            await pilot.pause(0.1)
            if screen.query_one(TextArea).text == broken:
                break
        assert screen.query_one(TextArea).text == broken
        await finish_check(pilot)
        assert "'abc' (a str, not a number)" in screen.status_text
        assert applied == []


async def test_weights_edit_goes_through_check_and_apply(editor):
    path, screen, applied = editor
    async with Host(screen).run_test(size=(160, 48)) as pilot:
        [weight] = screen.weight_inputs()
        assert (weight.name, weight.value) == ("correct", "1")
        weight.focus()
        weight.value = "2"
        await pilot.press("enter")
        await finish_check(pilot)
        assert 'WEIGHTS = {"correct": 2.0}' in path.read_text()
        assert screen.status_text.startswith("✓"), screen.status_text
        assert screen.last_report.new_mean == pytest.approx(2 * screen.last_report.old_mean)
        await pilot.press("ctrl+o")
        assert applied == [(path.read_text(), {"correct": 2.0})]


async def test_discard_restores_the_applied_version(editor):
    path, screen, applied = editor
    async with Host(screen).run_test(size=(160, 48)) as pilot:
        await save(pilot, screen, PARTIAL)
        await pilot.press("ctrl+r")
        assert path.read_text() == ARITHMETIC
        assert screen.query_one(TextArea).text == ARITHMETIC
        await pilot.press("ctrl+o")
        assert applied == []


async def test_a_failing_apply_is_shown_and_can_be_retried(tmp_path):
    path = tmp_path / "rewards.py"
    path.write_text(ARITHMETIC)
    attempts = []

    def on_apply(source, weights):
        attempts.append(source)
        if len(attempts) == 1:
            raise OSError("database is locked")

    screen = RewardEditorScreen(path, recent_groups, on_apply, k=3, timeout_s=1.0)
    async with Host(screen).run_test(size=(160, 48)) as pilot:
        await save(pilot, screen, PARTIAL)
        await pilot.press("ctrl+o")
        assert "could not apply: database is locked" in screen.status_text
        assert screen.applied_source == ARITHMETIC
        await pilot.press("ctrl+o")
        assert attempts == [PARTIAL, PARTIAL] and screen.applied_source == PARTIAL


async def test_a_new_reward_function_gets_its_weight_input(editor):
    path, screen, applied = editor
    two = ARITHMETIC.replace(
        'WEIGHTS = {"correct": 1.0}',
        'def short(example, completion):\n    return float(len(completion) <= 2)\n\n\nWEIGHTS = {"correct": 1.0, "short": 0.5}',
    )
    async with Host(screen).run_test(size=(160, 48)) as pilot:
        assert screen.status_text.startswith("Editing rewards.py")
        await save(pilot, screen, two)
        assert screen.status_text.startswith("✓"), screen.status_text
        await pilot.pause()
        assert [(w.name, w.value) for w in screen.weight_inputs()] == [("correct", "1"), ("short", "0.5")]
        await pilot.press("ctrl+o")
        assert applied == [(two, {"correct": 1.0, "short": 0.5})]


async def test_a_missing_reward_file_starts_from_the_applied_source(tmp_path):
    path = tmp_path / "copied-run" / "rewards.py"
    path.parent.mkdir()
    applied: list = []
    screen = RewardEditorScreen(path, recent_groups, lambda s, w: applied.append(s), applied_source=ARITHMETIC, k=3)
    async with Host(screen).run_test(size=(160, 48)) as pilot:
        assert "does not exist here" in screen.status_text
        assert screen.query_one(TextArea).text == ARITHMETIC
        await save(pilot, screen, PARTIAL)
        assert path.read_text() == PARTIAL
        assert screen.last_report.new_mean == pytest.approx(0.375)


def test_the_weights_panel_lists_functions_weights_leaves_out_with_their_style():
    """A verifiers-style brevity scored at weight 1 was missing from the panel (issue 33)."""
    from rlab.tui.reward_editor import source_weights

    source = ("def correct(example, completion):\n    return 1.0\n\n"
              "def brevity(completion, **kwargs):\n    return 1.0\n\n"
              "def _helper(completion):\n    return 0\n\n"
              "WEIGHTS = {'correct': 2.0}\n")
    assert source_weights(source) == {"correct": 2.0, "brevity": 1.0}
