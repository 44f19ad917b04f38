"""Pilot tests of the TUI's key bindings on the fixed small run file.

No engine runs here: the run file is written by the real StoreWriter (the
``demo`` run is ``running`` and owned by this test process), and the tests
check what the TUI shows and what it writes in the ``commands`` table.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from textual.widgets import DataTable, Input, Static

from fixtures.smalldb import REWARD_FILE, REWARD_V2, build_small_db
from rlab.store.reader import StoreReader
from rlab.store.textindex import build_text_index
from rlab.store.filesize import FileGrowth, file_bytes, human_bytes
from rlab.store.writer import StoreWriter
from rlab.tui.advantages import AdvantagesScreen
from rlab.tui.app import RolloutLabApp
from rlab.tui.dialogs import HelpScreen, QuitScreen, SearchScreen
from rlab.tui.group_view import GroupScreen
from rlab.tui.inspector import TrajectoryScreen
from rlab.tui.runs import CompareScreen, RunsScreen

SIZE = (120, 40)


@pytest.fixture
def db(tmp_path):
    """A fresh copy of the fixed run file and its run ids."""
    path = tmp_path / "run.db"
    return path, build_small_db(path)


async def until(pilot, condition, timeout: float = 10.0) -> None:
    """Let the app run (workers included) until ``condition()`` holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {condition.__doc__ or condition}")
        await pilot.pause(0.05)


async def loaded(pilot) -> None:
    """Wait for the first poll and the cursor's view."""
    app = pilot.app
    await until(pilot, lambda: app.view is not None and app.view.group is not None)


def commands(path, run_id) -> list[str]:
    with StoreReader(path) as reader:
        return [c["kind"] for c in reader.commands(run_id)]


async def test_dashboard_shows_run_header_and_tables(db):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await until(pilot, lambda: app.screen.query_one("#alerts", DataTable).row_count > 0
                    and app.screen.query_one("#groups", DataTable).row_count > 0)
        assert app.screen.title == "demo"
        size = human_bytes(file_bytes(path))  # the file is not growing: no rate shown
        # the fixture's run declares no success function: the header says what pass@1 counts then
        assert app.screen.sub_title == (f"arithmetic · step 7 (following) · RUNNING · pass@1 0.800 (= total reward >= 1) "
                                        f"· - steps/s · file {size}")
        assert app.screen.query_one("#groups", DataTable).row_count == 16
        assert app.screen.query_one("#rollouts", DataTable).row_count == 20
        alerts = app.screen.query_one("#alerts", DataTable)
        assert "perfect_share" in str(alerts.get_row_at(0)[1])


async def test_latest_run_is_watched_by_default(db):
    path, ids = db
    app = RolloutLabApp(path)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        assert app.run_id == ids["gigpo-demo"]
        assert "FINISHED" in app.screen.sub_title


async def test_space_pauses_and_resumes_through_the_commands_table(db):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("space")
        await until(pilot, lambda: commands(path, ids["demo"]) == ["pause"])
        await pilot.press("space")
        await until(pilot, lambda: commands(path, ids["demo"]) == ["pause", "resume"])


async def test_n_steps_once_only_when_paused(db):
    path, ids = db
    with StoreWriter(path) as writer:
        writer.set_status(ids["demo"], "running")
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("n")  # running: n does nothing
        await pilot.pause(0.2)
        await app.workers.wait_for_complete()
        assert commands(path, ids["demo"]) == []
        with StoreWriter(path) as writer:
            writer.set_status(ids["demo"], "paused")
        await until(pilot, lambda: (app.run_row or {}).get("status") == "paused")
        await pilot.press("n")
        await until(pilot, lambda: commands(path, ids["demo"]) == ["step"])


async def test_cursor_keys_move_between_steps_groups_trajectories(db):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        assert (app.view.cursor.step, app.view.cursor.group_pos, app.view.cursor.traj_pos) == (7, 0, 0)
        await pilot.press("left_square_bracket", "left_square_bracket")
        await until(pilot, lambda: app.view.cursor.step == 5)
        await pilot.press("right")
        await until(pilot, lambda: app.view.cursor.group_pos == 1)
        await pilot.press("right")  # clamped: the step has 2 groups
        await pilot.press("down", "down", "down", "down")  # clamped at the 4th trajectory
        await until(pilot, lambda: app.view.cursor.traj_pos == 3)
        await pilot.press("up", "left", "right_square_bracket")
        await until(pilot, lambda: (app.view.cursor.step, app.view.cursor.group_pos,
                                    app.view.cursor.traj_pos) == (6, 0, 2))
        assert app.view.group["step"] == 6 and app.view.group["idx"] == 0
        assert app.view.trajectory["idx"] == 2
        line = str(app.screen.query_one("#cursor-line", Static).render())
        assert "step 6 · group 1/2" in line and "trajectory 3/4" in line


async def test_g_opens_group_view_and_s_sorts_by_reward(db):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("left_square_bracket")  # step 6: mixed rewards
        await until(pilot, lambda: app.view.cursor.step == 6)
        await pilot.press("g")
        await until(pilot, lambda: isinstance(app.screen, GroupScreen))
        screen = app.screen
        await until(pilot, lambda: len(screen.query(".traj-column")) == 4)
        await pilot.press("s")
        await pilot.pause(0.1)
        assert screen.sort == "reward"
        rewards = [t["reward"] for t in screen.shown]
        assert rewards == sorted(rewards, reverse=True) and rewards[0] > rewards[-1]
        assert len(screen.query(".traj-column")) == 4
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, GroupScreen))


async def test_t_opens_inspector_and_l_toggles_shading(db):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("t")
        await until(pilot, lambda: isinstance(app.screen, TrajectoryScreen))
        screen = app.screen
        await until(pilot, lambda: "parse_status" in str(screen.query_one("#details-text").render()))
        assert screen.query_one("#traj-tokens").border_title == "tokens by advantage sign"
        await pilot.press("l")
        assert screen.shading == "logprob"
        assert "no per-token logprobs" in str(screen.query_one("#tokens-text").render())
        await pilot.press("l")
        assert screen.query_one("#traj-tokens").border_title == "tokens by sampler mismatch"
        assert "no trainer log-probs stored" in str(screen.query_one("#tokens-text").render())
        await pilot.press("l")
        assert screen.shading == "advantage"
        await pilot.press("down")  # the cursor keys work on the inspector too
        await until(pilot, lambda: screen._traj is not None and screen._traj["idx"] == 1)


async def test_a_opens_advantages_and_enter_highlights_an_anchor_group(db):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["gigpo-demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, AdvantagesScreen))
        screen = app.screen
        table = screen.query_one(DataTable)
        await until(pilot, lambda: table.row_count == 9)
        await pilot.press("tab", "enter")  # first row: episode 0, t 0, anchor pos=0
        await until(pilot, lambda: screen.anchor == "pos=0")
        highlighted = [r for r in range(table.row_count)
                       if "yellow" in str(table.get_row_at(r)[0].style)]
        assert len(highlighted) == 5  # the anchor group pos=0 has 5 members
        await pilot.press("escape", "escape")
        await until(pilot, lambda: not isinstance(app.screen, AdvantagesScreen))


@pytest.mark.parametrize("indexed", [False, True], ids=["scan", "text_index"])
async def test_slash_searches_and_opens_the_match(db, indexed):
    path, ids = db
    if indexed:  # `rlab index`: the same matches, and the title says how they were found
        with StoreWriter(path) as writer:
            build_text_index(writer.database)
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("slash")
        await until(pilot, lambda: isinstance(app.screen, SearchScreen))
        app.screen.query_one(Input).value = "59+41"
        await pilot.press("enter")
        results = app.screen.query_one("#search-results", DataTable)
        await until(pilot, lambda: results.row_count == 4)
        assert ("through the text index" in results.border_title) == indexed
        assert "every trajectory read" in results.border_title
        await pilot.press("down", "enter")
        await until(pilot, lambda: isinstance(app.screen, TrajectoryScreen))
        await until(pilot, lambda: app.view.trajectory is not None
                    and app.view.trajectory["prompt"] == "59+41=")


async def test_search_out_of_time_says_how_far_it_read_and_enter_reads_further_back(db, monkeypatch):
    """Issue 47, 7: a search keeps to its time budget; the title says how far back it read."""
    monkeypatch.setattr("rlab.tui.dialogs.SEARCH_BUDGET_S", 0.0)  # one window a search
    monkeypatch.setattr("rlab.store.search.FIRST_WINDOW", 16)
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("slash")
        await until(pilot, lambda: isinstance(app.screen, SearchScreen))
        box = app.screen.query_one(Input)
        box.value = "="
        await pilot.press("enter")
        results = app.screen.query_one("#search-results", DataTable)
        await until(pilot, lambda: "read back to step" in (results.border_title or ""))
        first = results.row_count
        assert 0 < first <= 16 and "enter in the box reads further back" in results.border_title
        box.focus()
        await pilot.press("enter")
        await until(pilot, lambda: results.row_count > first)
        keys = [row.value for row in results.rows]
        assert len(keys) == len(set(keys))  # what it read before is not read again


async def test_r_lists_runs_and_compares_manifests(db):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen))
        table = app.screen.query_one(DataTable)
        await until(pilot, lambda: table.row_count == 2)
        assert [str(c) for c in table.get_row_at(0)[2:]] == ["demo", "train", "RUNNING", "arithmetic",
                                                            "7", "0.80"]  # training steps 1-7 (step 0 is the eval before training)
        await pilot.press("up", "x", "down", "c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen))
        # two training runs compare by their held-out evals at matched steps, as `rlab compare`
        # pairs them; these two evaluated at no common step, and the screen says so
        await until(pilot, lambda: app.screen.branches is not None)
        assert "A demo and B gigpo-demo" in str(app.screen.query_one("#verdict", Static).render())
        assert "no step after 0 has a held-out eval in both runs" in str(
            app.screen.query_one("#paired", Static).render())
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen))
        await pilot.press("enter")  # watch the highlighted run (gigpo-demo)
        await until(pilot, lambda: app.run_id == ids["gigpo-demo"] and app.view is not None
                    and app.view.group is not None)
        assert app.screen.title == "gigpo-demo"


async def test_switching_runs_clears_the_dashboard_at_once(db):
    """The dashboard watches the app's run_id: it forgets the previous run at the switch."""
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        dashboard, groups = app.screen, app.screen.query_one("#groups", DataTable)
        await until(pilot, lambda: groups.row_count > 0)
        app.switch_run(ids["gigpo-demo"])
        assert groups.row_count == 0 and app.view is None
        await until(pilot, lambda: dashboard.title == "gigpo-demo" and groups.row_count > 0)


async def test_question_mark_shows_help(db):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, HelpScreen))


async def test_e_opens_the_reward_editor_on_the_run_reward_file(db):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("e")
        from rlab.tui.reward_editor import RewardEditorScreen

        await until(pilot, lambda: isinstance(app.screen, RewardEditorScreen))
        assert app.screen.path == REWARD_FILE
        assert app.screen.applied_source == REWARD_V2  # the run's latest version
        app._apply_rewards("WEIGHTS = {}", {"correct": 2.0})  # what the editor calls on apply
        await until(pilot, lambda: commands(path, ids["demo"]) == ["set_rewards"])
    with StoreReader(path) as reader:
        assert reader.commands(ids["demo"])[0]["payload"] == {"source": "WEIGHTS = {}",
                                                               "weights": {"correct": 2.0}}


async def test_u_sends_the_previous_reward_version(db):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("u")
        await until(pilot, lambda: commands(path, ids["demo"]) == ["set_rewards"])
    with StoreReader(path) as reader:
        assert reader.commands(ids["demo"])[0]["payload"] == {"source": REWARD_FILE.read_text(),
                                                               "weights": {"correct": 1.0}}


async def test_recent_groups_feeds_the_reward_editor(db):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        groups = await asyncio.to_thread(app.recent_groups, 3)
    assert len(groups) == 3
    first = groups[0]["trajectories"][0]
    assert first["example"]["answer"] == "106"  # the full example, from the scenario
    assert set(first) == {"example", "completion", "reward"}


async def test_q_leave_exits_without_stopping(db):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, QuitScreen))
        await pilot.press("l")
        await until(pilot, lambda: app._exit_renderables is not None or not app.is_running)
    assert commands(path, ids["demo"]) == []


async def test_q_stop_sends_stop_then_exits(db):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, QuitScreen))
        await pilot.click("#stop")
        await until(pilot, lambda: not app.is_running)
    assert commands(path, ids["demo"]) == ["stop"]


async def test_q_cancel_stays_and_finished_run_quits_at_once(db):
    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("q")
        await until(pilot, lambda: isinstance(app.screen, QuitScreen))
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, QuitScreen))
        assert app.is_running
    finished = RolloutLabApp(path, run_id=ids["gigpo-demo"])
    async with finished.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("q")
        await until(pilot, lambda: not finished.is_running)
    assert commands(path, ids["gigpo-demo"]) == []


async def test_app_waits_for_the_engine_run_to_appear(tmp_path):
    """With engine_cmd, the app spawns it and watches the run it creates."""
    import sys

    path = tmp_path / "run.db"
    script = ("import sys; sys.path.insert(0, %r); from rlab.store.writer import StoreWriter; "
              "w = StoreWriter(%r); w.start_run('spawned', 'arithmetic', {}, {}); w.close()"
              % (str(__import__('pathlib').Path(__file__).resolve().parents[1]), str(path)))
    app = RolloutLabApp(path, run_name="spawned", engine_cmd=[sys.executable, "-c", script])
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.run_row is not None, timeout=20)
        assert app.run_row["name"] == "spawned"
        assert app.engine is not None and app.engine.wait(timeout=10) == 0
    assert (tmp_path / "run.db.spawned.engine.log").exists()  # the run's own log


def test_engine_cmd_needs_run_name_and_watch_needs_a_file(tmp_path):
    with pytest.raises(ValueError, match="engine_cmd needs run_name"):
        RolloutLabApp(tmp_path / "x.db", engine_cmd=["true"])
    with pytest.raises(FileNotFoundError, match="no run file at"):
        RolloutLabApp(tmp_path / "x.db")


async def test_engine_that_dies_early_is_reported(tmp_path):
    """Its exit code and the log's last lines stay on screen; never "waiting"."""
    import sys

    script = ("import sys\nfor i in range(12): print(f'log line {i}')\n"
              "print('ImportError: [bold]not markup[/] from tui/__init__.py', file=sys.stderr)\n"
              "raise SystemExit(3)")
    app = RolloutLabApp(tmp_path / "x.db", run_name="never", engine_cmd=[sys.executable, "-c", script])
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.engine_failure is not None, timeout=20)
        await pilot.pause(0.3)
        screen = app.screen
        assert "exited with code 3" in screen.sub_title and "waiting" not in screen.sub_title
        shown = str(screen.query_one("#cursor-line").render())
        assert "ImportError: [bold]not markup[/] from tui/__init__.py" in shown
        assert "log line 11" in shown and "log line 3" not in shown  # the last lines only
        assert any("exited with code 3" in n.message for n in app._notifications)


def test_file_growth_rate_over_its_window(tmp_path):
    path = tmp_path / "run.db"
    path.write_bytes(b"x" * 1000)
    growth = FileGrowth(path, window=60)
    growth.sample(now=0.0)
    assert growth.describe() == "1000 B"
    path.write_bytes(b"x" * 3048)
    (tmp_path / "run.db-wal").write_bytes(b"x" * 1024)  # the WAL counts too
    growth.sample(now=30.0)
    assert growth.bytes_per_minute() == pytest.approx(6144)
    assert growth.describe() == "4.0 KB +6.0 KB/min"
    assert growth.describe(with_rate=False) == "4.0 KB"  # issue 47, 4: a paused run's file does not grow
    growth.sample(now=100.0)  # the first samples left the window: no growth since
    assert growth.describe() == "4.0 KB"
    growth.sample(now=110.0)
    path.write_bytes(b"x" * 10240)
    growth.sample(now=130.0)
    growth.restart()  # a run resumed: the minute before held its pause
    growth.sample(now=131.0)
    assert growth.describe() == "11.0 KB" and growth.bytes_per_minute() is None


def test_anchor_share_by_step(db):
    path, ids = db
    with StoreReader(path) as reader:
        rows = reader.anchor_share_by_step(ids["gigpo-demo"])
        assert reader.anchor_share_by_step(ids["demo"]) == []
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert rows[0]["turns"] == 9 and rows[0]["share"] == pytest.approx(7 / 9)


async def test_alert_thresholds_come_from_the_run_config(tmp_path):
    path = tmp_path / "run.db"
    with StoreWriter(path) as writer:
        run_id = writer.start_run("cfg", "arithmetic", {"alerts": {"perfect_share": 0.5}}, {})
        bad = writer.start_run("bad", "arithmetic", {"alerts": {"perfect_shar": 0.5}}, {})
    app = RolloutLabApp(path, run_id=run_id)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.feed is not None)
        assert app.feed.watch.thresholds.perfect_share == 0.5
    app = RolloutLabApp(path, run_id=bad)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.feed is not None)
        assert app.feed.watch.thresholds.perfect_share == 0.9
        # one line naming the key as rlab set takes it, not pydantic's multi-line report
        assert [n.message for n in app._notifications if "alert" in n.message] == [
            "bad alert thresholds in the run config, using the defaults: alert.perfect_shar: no such alert setting"]


def test_completions_of_step(db):
    path, ids = db
    with StoreReader(path) as reader:
        texts = reader.completions_of_step(ids["demo"], 6)
        groups = reader.groups_of_step(ids["demo"], 6)
        assert sorted(texts) == [g["id"] for g in groups]
        full = reader.group(groups[0]["id"])
        assert texts[groups[0]["id"]] == [t["completion"] for t in full["trajectories"]]
        assert reader.completions_of_step(ids["demo"], 99) == {}


async def test_v_ranks_a_group_under_two_reward_versions(db):
    from rich.table import Table

    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        await pilot.press("left_square_bracket", "g")  # step 6, scored by version 2
        await until(pilot, lambda: isinstance(app.screen, GroupScreen))
        screen = app.screen
        await until(pilot, lambda: len(screen.versions) == 2)
        await pilot.press("v")
        await until(pilot, lambda: screen.ranking is not None, timeout=30)
        assert isinstance(screen.ranking, Table), screen.ranking
        assert "ranking under v2 vs v1" in str(screen.ranking.title)
        assert "ranking changed" in str(screen.ranking.title)
        rows = list(zip(*[col._cells for col in screen.ranking.columns]))
        # completions 90, 92 (wrong), 90, "The answer is 90" (malformed for `correct`);
        # v2 = correct + 0.5 * short: the wrong short answer now beats the long one.
        assert rows == [("#0", "1.50", "1", "1.00", "1"), ("#1", "0.50", "3", "0.00", "3"),
                        ("#2", "1.50", "1", "1.00", "1"), ("#3", "0.00", "4", "0.00", "3")]


def test_token_shading_by_advantage_logprob_and_sampler_mismatch():
    from rlab.tui.inspector import shaded_tokens

    single = {"completion": "12 apples", "advantage": -0.5, "details": {}}
    text = shaded_tokens(single, "advantage")
    assert text.plain == "12 apples"
    assert {str(span.style) for span in text.spans} == {"on dark_red"}
    stored = {"completion": "12", "advantage": 0.5,
              "details": {"tokens": ["1", "2"], "logprobs": [0.0, -5.0]}}
    styles = [str(span.style) for span in shaded_tokens(stored, "logprob").spans]
    assert styles == ["on rgb(0,120,40)", "on rgb(158,40,40)"]  # sure token green, unlikely red
    from rlab.store.tokens import pack, pack_logprobs

    ends, sampled = pack([1, 2, 3], [-0.5, -2.0, -1.0])
    measured = {"completion": "123", "token_ends": ends, "token_logprobs": sampled,
                "token_policy_logprobs": pack_logprobs([-0.5, -1.0, -3.0])}  # same, +1 nat, -2 nats
    text = shaded_tokens(measured, "mismatch")
    assert "mean |diff| 1.000 nats, max 2.000" in text.plain and text.plain.endswith("123")
    shades = {text.plain[span.start:span.end]: str(span.style) for span in text.spans if "rgb" in str(span.style)}
    assert shades == {"2": "on rgb(30,100,200)", "3": "on rgb(200,30,66)"}  # blue: policy likes it more; red: less
    assert "no trainer log-probs stored" in shaded_tokens(stored, "mismatch").plain
    episode = {"messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": "left"},
                            {"role": "user", "content": "ok"}, {"role": "assistant", "content": "right"}],
               "turns": [{"t": 0, "advantage": -1.0}, {"t": 1, "advantage": 2.0}]}
    text = shaded_tokens(episode, "advantage")
    assert text.plain == "t0: left\nt1: right\n"
    assert [str(s.style) for s in text.spans if "dark" in str(s.style)] == ["on dark_red",
                                                                           "on dark_green"]
    call = {"id": "c0", "type": "function", "function": {"name": "multiply", "arguments": {"a": 2, "b": 3}}}
    agent = {"messages": [{"role": "user", "content": "2*3?"}, {"role": "assistant", "content": "", "tool_calls": [call]},
                          {"role": "tool", "tool_call_id": "c0", "content": "6"}, {"role": "assistant", "content": "6"}],
             "turns": [{"t": 0, "advantage": 1.0}, {"t": 1, "advantage": 1.0}]}
    text = shaded_tokens(agent, "advantage")  # a turn that only calls shows the call it was trained on
    assert text.plain == "t0:  → multiply(a=2, b=3)\nt1: 6\n" and "on dark_green" in str(text.spans[1].style)


async def test_unknown_run_id_is_reported_with_the_runs_in_the_file(db):
    path, ids = db
    app = RolloutLabApp(path, run_id=42)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: any("no run with id 42" in n.message and "1 (demo)" in n.message
                                       for n in app._notifications))
        assert app.feed is None


async def test_new_engine_errors_are_announced_but_not_old_ones(db):
    path, ids = db
    with StoreWriter(path) as writer:
        writer.write_event(ids["demo"], "error", {"error": "old failure"}, step=2)
    app = RolloutLabApp(path, run_id=ids["demo"])
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        with StoreWriter(path) as writer:
            writer.write_event(ids["demo"], "error", {"reward_edit_rejected": "line 3: boom"}, step=7)
        await until(pilot, lambda: any("line 3: boom" in n.message for n in app._notifications))
        assert not any("old failure" in n.message for n in app._notifications)


async def test_cursor_leaves_a_step_without_groups_when_data_arrives(tmp_path):
    """The engine writes an eval-only row for step 0 before any group exists."""
    from fixtures.smalldb import _single_turn_group

    path = tmp_path / "run.db"
    with StoreWriter(path) as writer:
        run_id = writer.start_run("fresh", "arithmetic", {}, {})
        writer.write_step(run_id, 0, {"eval/pass_at_1": 0.1})
    app = RolloutLabApp(path, run_id=run_id)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.view is not None)
        assert app.view.group is None and app.view.cursor.step == 0
        with StoreWriter(path) as writer:
            writer.write_groups(run_id, 1, [_single_turn_group(1, 0, 1)])
            writer.write_step(run_id, 1, {"reward": 0.5})
        await until(pilot, lambda: app.view.group is not None)
        assert app.view.cursor.step == 1


async def test_dashboard_cursor_follows_new_steps_until_moved(db):
    from fixtures.smalldb import _single_turn_group

    path, ids = db
    app = RolloutLabApp(path, run_id=ids["demo"])

    def write_step(step):
        with StoreWriter(path) as writer:
            writer.write_groups(ids["demo"], step, [_single_turn_group(step, 0, 2)])
            writer.write_step(ids["demo"], step, {"reward": 0.5})

    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot)
        assert app.view.cursor.step == 7
        write_step(8)
        await until(pilot, lambda: app.view.cursor.step == 8)  # on the newest step: follows
        await pilot.press("left_square_bracket")
        await until(pilot, lambda: app.view.cursor.step == 7)
        write_step(9)
        await until(pilot, lambda: app.feed.last_step == 9)
        await pilot.pause(0.3)
        assert app.view.cursor.step == 7  # moved away by the user: stays
