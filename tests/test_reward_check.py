"""engine.rewards.edit.check: validating and dry-running reward edits in a child process."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlab.engine.rewards.edit.check import RewardCheckError, check_edit, dry_run, validate

GOOD = (Path(__file__).resolve().parents[1] / "scenarios" / "arithmetic" / "rewards.py").read_text()
EXAMPLE = {"id": "e1", "prompt": "What is 2 + 3?", "answer": 5}
COMPLETIONS = ["5", "7", "five", ""]
REWARD_LINE = '"reward": 1.0 if ok else 0.0'


def line_of(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def bad_edits():
    """(name, source, kind, line or set of lines, text in message) for each bad edit of the issue."""
    syntax = GOOD.replace("text = completion.strip()", "text = completion.strip(")
    raising = GOOD.replace("    text = completion.strip()", "    text = completion.strip()\n    raise KeyError('boom')")
    hang = GOOD.replace("    text = completion.strip()", "    while True:\n        pass")
    abc = GOOD.replace(REWARD_LINE, '"reward": "abc"')
    nan = GOOD.replace(REWARD_LINE, '"reward": float("nan")')
    def_line = line_of(GOOD, "def correct(")
    return [
        ("syntax", syntax, "syntax", line_of(syntax, "strip("), "SyntaxError in rewards.py line"),
        ("import", "import not_a_module_xyz\n" + GOOD, "import", 1, "No module named 'not_a_module_xyz'"),
        ("raises", raising, "exception", line_of(raising, "raise KeyError"), "correct: KeyError: 'boom'"),
        ("abc", abc, "bad_reward", def_line, "returned reward 'abc' (a str, not a number)"),
        ("nan", nan, "bad_reward", def_line, "returned reward nan (not finite)"),
        # a hang is reported on the loop's `while` line or its body's, by Python version
        ("hang", hang, "timeout", {line_of(hang, "while True"), line_of(hang, "pass")}, "TimeoutError: no answer after 1 s"),
        ("import_hang", "while True:\n    pass\n" + GOOD, "timeout", {1, 2}, "did not finish within the 1 s limit"),
    ]


@pytest.mark.parametrize("name, source, kind, line, text", bad_edits(), ids=[e[0] for e in bad_edits()])
def test_each_bad_edit_gives_a_clear_message_with_its_line(name, source, kind, line, text):
    result = validate(source, [EXAMPLE] * 4, COMPLETIONS, timeout_s=1.0)
    assert not result.ok
    assert result.kind == kind
    lines = line if isinstance(line, set) else {line}
    assert result.lineno in lines
    assert text in result.message
    assert f"line {result.lineno}" in result.message


def test_a_good_edit_is_valid_and_reports_weights_and_rewards():
    result = validate(GOOD, [EXAMPLE] * 4, COMPLETIONS, timeout_s=2.0)
    assert result.ok and result.kind is None
    assert result.weights == {"correct": 1.0}
    assert result.rewards == [1.0, 0.0, 0.0, 0.0]
    assert len(result.sha256) == 64


def test_prints_in_the_reward_file_do_not_break_the_check():
    result = validate("print('hello from rewards')\n" + GOOD, [EXAMPLE], ["5"], timeout_s=2.0)
    assert result.ok, result.message


def groups_of(completions_per_group, stored):
    return [
        {"trajectories": [{"example": EXAMPLE, "completion": c, "reward": stored(c)} for c in group]}
        for group in completions_per_group
    ]


def test_dry_run_compares_old_and_new_rewards_per_group():
    partial = GOOD.replace(REWARD_LINE, '"reward": 1.0 if ok else (0.5 if parsed is not None else 0.0)')
    groups = groups_of([["5", "7", "x", "x"], ["5", "5", "x", ""], ["x", "7", "7", "x"]], stored=lambda c: -1.0)
    report = dry_run(GOOD, partial, groups, timeout_s=2.0)
    assert [g.old_rewards for g in report.groups] == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0]]
    assert [g.new_rewards for g in report.groups] == [[1, 0.5, 0, 0], [1, 1, 0, 0], [0, 0.5, 0.5, 0]]
    assert [g.ranking_changed for g in report.groups] == [True, False, True]
    assert report.groups_ranking_changed == 2
    assert report.groups[1].tau == pytest.approx(1.0)
    assert report.groups[2].tau is None  # old rewards all equal: no ranking
    assert report.groups[0].best_changed is False
    assert report.old_mean == pytest.approx(3 / 12)
    assert report.new_mean == pytest.approx(4.5 / 12)
    assert sum(report.old_counts) == sum(report.new_counts) == 12
    assert report.new_errors == 0


def test_dry_run_without_old_source_uses_stored_rewards():
    groups = groups_of([["5", "7"]], stored=lambda c: 0.25)
    report = dry_run(None, GOOD, groups, timeout_s=2.0)
    assert report.groups[0].old_rewards == [0.25, 0.25]
    assert report.groups[0].new_rewards == [1.0, 0.0]


def test_dry_run_of_a_file_that_does_not_load_raises_with_the_reason():
    with pytest.raises(RewardCheckError) as info:
        dry_run(GOOD, "import not_a_module_xyz\n", groups_of([["5"]], stored=lambda c: 1.0), timeout_s=2.0)
    assert info.value.result.kind == "import"
    assert "rewards.py: ImportError in rewards.py line 1" in str(info.value)


def test_dry_run_rejects_malformed_groups():
    with pytest.raises(ValueError, match="group 0 trajectory 0 needs example, completion and reward"):
        dry_run(None, GOOD, [{"trajectories": [{"example": EXAMPLE, "completion": "5"}]}])
    with pytest.raises(ValueError, match="'trajectories' list"):
        dry_run(GOOD, GOOD, [{"rows": []}])


def test_check_edit_validates_on_every_trajectory_then_dry_runs():
    groups = groups_of([["5", "7"], ["five", "5"]], stored=lambda c: 0.0)
    result, report = check_edit(GOOD, GOOD.replace(REWARD_LINE, '"reward": 2.0 if ok else 0.0'), groups, 2.0)
    assert result.ok and result.rewards == [2.0, 0.0, 0.0, 2.0]
    assert [g.new_mean for g in report.groups] == [1.0, 1.0]
    assert report.groups_ranking_changed == 0
    bad, none = check_edit(GOOD, GOOD.replace(REWARD_LINE, '"reward": "abc"'), groups, 2.0)
    assert not bad.ok and bad.kind == "bad_reward" and none is None
    broken_old, none = check_edit("import not_a_module_xyz\n", GOOD, groups, 2.0)
    assert not broken_old.ok and none is None
    assert broken_old.message.startswith("the applied reward file: ImportError")
    loads_only, none = check_edit(GOOD, GOOD, [], 2.0)
    assert loads_only.ok and none is None
