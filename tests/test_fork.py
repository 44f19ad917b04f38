"""Changes as experiments (issue 38): forks, rlab set, resumes with changes, branch compares.

The runs train the untrained tiny model (fast plumbing); whether a fork
helps is measured on the warm-started policies in the slow tests at the end
(`python -m pytest -m slow tests/test_fork.py`).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlab.engine.run.config import RunConfig
from rlab.engine.step import run
from rlab.engine.train.retention import Checkpoint, to_prune
from rlab.store.reader import StoreReader

ROOT = Path(__file__).resolve().parents[1]


def _config(db, model_dir, **kw) -> RunConfig:
    base = dict(model=model_dir, db=db, name="p", prompts_per_step=4, group_size=4, eval_size=16, eval_every=2,
                checkpoint_every=3, max_steps=8)
    return RunConfig.model_validate({**base, **kw})


def _rlab(*args, cwd, timeout=240):
    return subprocess.run([sys.executable, "-P", "-m", "rlab.engine.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def _steps(reader, run_id, steps):
    """Per step: the sampled completions and rewards in write order, and the loss."""
    metrics = {m["step"]: m for m in reader.step_metrics(run_id)}
    out = {}
    for step in steps:
        trajectories = [t for g in reader.groups_of_step(run_id, step) for t in reader.group(g["id"])["trajectories"]]
        out[step] = ([t["completion"] for t in trajectories], [t["reward"] for t in trajectories],
                     metrics[step]["loss"])
    return out


@pytest.fixture(scope="module")
def parent(tmp_path_factory, raw_tiny_model_dir):
    """A finished 8-step run with checkpoints at 3, 6 and 8 and evals every 2 steps."""
    folder = tmp_path_factory.mktemp("fork")
    db = folder / "f.db"
    run(_config(db, raw_tiny_model_dir))
    return db


def test_a_fork_with_no_change_repeats_the_parents_next_five_steps(parent):
    run(RunConfig(db=parent, fork_from="p@3", name="copy"))  # to the parent's budget: steps 4..8
    reader = StoreReader(parent)
    p, c = reader.run_by_name("p"), reader.run_by_name("copy")
    assert (c["parent_id"], c["fork_step"]) == (p["id"], 3)
    assert reader.steps(c["id"]) == [3, 4, 5, 6, 7, 8]  # 3: the held-out eval it starts from
    assert _steps(reader, c["id"], range(4, 9)) == _steps(reader, p["id"], range(4, 9))
    [fork] = [e for e in reader.events(c["id"]) if e["kind"] == "fork"]
    assert fork["step"] == 3 and fork["payload"]["parent"] == "p" and fork["payload"]["changes"] == {}


@pytest.mark.e2e
def test_a_fork_s_max_steps_counts_its_own_steps(parent, tmp_path):
    """Issue 47, 1.2: `rlab fork RUN@50 --max-steps 20` trained nothing (the budget counted from
    step 0); it trains 20 steps after the fork step, and without it the fork runs to the parent's."""
    done = _rlab("fork", "p@6", "--name", "two", "--db", parent, "--headless", "--max-steps", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["steps"] == 2
    assert StoreReader(parent).steps(StoreReader(parent).run_by_name("two")["id"]) == [6, 7, 8]
    run(RunConfig(db=parent, fork_from="p@6", name="inherits"))  # the parent's --max-steps 8
    assert StoreReader(parent).steps(StoreReader(parent).run_by_name("inherits")["id"]) == [6, 7, 8]


def test_a_fork_changes_what_it_is_given_and_stores_its_lineage(parent, tmp_path):
    rewards = tmp_path / "lenient.py"
    rewards.write_text("def correct(example, completion):\n    return 0.25\n\nWEIGHTS = {'correct': 1.0}\n")
    run(RunConfig(db=parent, fork_from="p@best", name="lenient", lr=1e-4, rewards=rewards, max_steps=10))
    reader = StoreReader(parent)
    child = reader.run_by_name("lenient")
    best = max((c for c in reader.checkpoints(reader.run_by_name("p")["id"]) if c["eval"] is not None),
               key=lambda c: (c["eval"], c["step"]))
    lineage = child["config"]["fork"]
    assert child["fork_step"] == best["step"] and lineage["changes"] == {"lr": 1e-4, "max_steps": 10}
    assert lineage["rewards"] == str(rewards.resolve()) and lineage["reward_version"] == 2
    assert [v["version"] for v in reader.reward_versions(child["id"])] == [1, 2]
    first = reader.step_metrics(child["id"])[1]
    assert first["settings/lr"] == 1e-4 and first["reward"] == 0.25 and first["reward_version"] == 2
    out = tmp_path / "export"
    assert _rlab("export", "lenient", "--out", out, "--db", parent, cwd=tmp_path).returncode == 0
    assert json.loads((out / "manifest.json").read_text())["config"]["fork"]["parent"] == "p"
    listed = _rlab("runs", "--db", parent, cwd=tmp_path).stdout
    assert f"└ @{best['step']} lenient" in listed


@pytest.mark.parametrize("args, says", [
    (["--model", "elsewhere"], "--model cannot change on a fork: the checkpoint holds this model's weights"),
    (["--lora-rank", "8"], "--lora-rank cannot change on a fork"),
    (["--lr", "-1"], "--lr -1: must be greater than 0"),
], ids=["model", "lora-rank", "bad-value"])
def test_a_fork_refuses_what_it_cannot_change_in_one_line(parent, tmp_path, args, says):
    done = _rlab("fork", "p@3", "--name", "nope", "--db", parent, "--headless", *args, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
    assert StoreReader(parent).run_by_name("nope") is None


def test_a_fork_names_the_checkpoints_it_can_start_from(parent, tmp_path):
    done = _rlab("fork", "p@5", "--name", "nope", "--db", parent, cwd=tmp_path)
    assert done.returncode == 2 and "no checkpoint at step 5; its checkpoints: 3, 6, 8" in done.stderr


def test_a_resume_takes_the_settings_that_may_change_and_refuses_the_rest(tmp_path, raw_tiny_model_dir):
    db = tmp_path / "r.db"
    run(_config(db, raw_tiny_model_dir, max_steps=3))
    refused = _rlab("run", "--headless", "--resume", "p", "--db", db, "--group-size", "2", cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "--group-size cannot change here" in refused.stderr and "rlab fork p@latest" in refused.stderr
    run(RunConfig(db=db, resume="p", lr=2e-4, max_steps=5))
    reader = StoreReader(db)
    [settings] = [e for e in reader.events(1) if e["kind"] == "settings"]
    assert settings["step"] == 4 and settings["payload"]["changes"] == {"lr": 2e-4, "max_steps": 5}
    assert {m["step"]: m["settings/lr"] for m in reader.step_metrics(1) if m["step"] > 3} == {4: 2e-4, 5: 2e-4}


def test_a_resume_overrides_a_setting_a_later_step_would_replay(tmp_path, raw_tiny_model_dir):
    """Issue 47, 1.3: every resume replayed a bad setting at its step (and died again); an
    option given on the resume now wins over the replayed change of it."""
    from rlab.engine.run.fork import plan_resume
    from rlab.store.writer import StoreWriter

    db = tmp_path / "r.db"
    run(_config(db, raw_tiny_model_dir, max_steps=3))
    with StoreWriter(db) as writer:  # as `rlab set` records a change made for step 5 (after the checkpoint)
        writer.write_event(1, "settings", {"version": 1, "changes": {"temperature": 9.0, "lr": 1e-4},
                                           "from_step": 5}, step=5)
    plan = plan_resume(RunConfig(db=db, resume="p", temperature=0.9, max_steps=6))
    assert plan.config.temperature == 0.9 and plan.replays == [(5, {"lr": 1e-4}, 1)]


def test_settings_versions_keep_their_numbers_across_a_resume(tmp_path, raw_tiny_model_dir):
    """Issue 47, 1.3: a resume numbered its own change after the changes in force at its first step,
    so it took the number of a change the re-run steps then made again under another number."""
    from rlab.store.writer import StoreWriter

    db = tmp_path / "r.db"
    run(_config(db, raw_tiny_model_dir, max_steps=3))
    with StoreWriter(db) as writer:  # changes made for steps 5 and 6, lost with them when the run died
        writer.write_event(1, "settings", {"version": 1, "changes": {"lr": 1e-4}, "from_step": 5}, step=5)
        writer.write_event(1, "settings", {"version": 2, "changes": {"temperature": 0.8}, "from_step": 6}, step=6)
    run(RunConfig(db=db, resume="p", max_steps=7))
    reader = StoreReader(db)
    made = [(e["step"], e["payload"]["version"], bool(e["payload"].get("replayed")))
            for e in reader.events(1) if e["kind"] == "settings"]
    assert made == [(5, 1, False), (6, 2, False), (4, 3, False), (5, 1, True), (6, 2, True)]
    assert {m["step"]: m["settings/version"] for m in reader.step_metrics(1) if m["step"] > 3} == {
        4: 3, 5: 1, 6: 2, 7: 2}


@pytest.mark.e2e
def test_rlab_set_changes_a_live_run_at_the_next_step_and_refuses_a_bad_value(tmp_path, raw_tiny_model_dir):
    db = tmp_path / "s.db"
    proc = subprocess.Popen([sys.executable, "-P", "-m", "rlab.engine.cli", "run", "--headless", "--db", str(db),
                             "--model", str(raw_tiny_model_dir), "--name", "live", "--prompts-per-step", "4",
                             "--group-size", "4", "--eval-every", "1000", "--max-steps", "3000",
                             "--lr-warmup-steps", "0", "--lr-final-ratio", "1"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: _last_step(db, "live") >= 2)
        bad = _rlab("set", "live", "lr=-1", "--db", db, cwd=tmp_path)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "must be greater than 0" in bad.stderr
        refused = _rlab("set", "live", "group_size=2", "--db", db, cwd=tmp_path)
        assert refused.returncode == 2 and "group_size cannot change between steps" in refused.stderr
        done = _rlab("set", "live", "lr=0.00012", "alert.hack_gap=0.3", "--db", db, cwd=tmp_path)
        assert done.returncode == 0 and "settings version 1 from step" in done.stdout, done.stderr
        reader = StoreReader(db)
        [event] = [e for e in reader.events(1) if e["kind"] == "settings"]
        _wait(lambda: _last_step(db, "live") >= event["step"])
        rows = {m["step"]: m for m in reader.step_metrics(1)}
        assert rows[event["step"]]["learning_rate"] == 0.00012 and rows[event["step"]]["settings/version"] == 1
        assert rows[event["step"] - 1]["learning_rate"] == RunConfig().lr  # before: as started
        assert [c["kind"] for c in reader.commands(1)] == ["set_settings"]  # the refused ones sent nothing
        # issue 47, 1.3: more prompts than the task has were accepted, and killed the run at its next step
        many = _rlab("set", "live", "prompts_per_step=100000", "--db", db, cwd=tmp_path)
        assert many.returncode == 2 and "has 7600 training prompts; pass at most 7600" in many.stderr, many.stderr
        hot = _rlab("set", "live", "temperature=1e9", "--db", db, cwd=tmp_path)
        assert hot.returncode == 2 and "less than or equal to 10" in hot.stderr
        before = _last_step(db, "live")
        _wait(lambda: _last_step(db, "live") > before + 1)  # the run goes on
        assert proc.poll() is None and reader.run_by_name("live")["status"] == "running"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)


@pytest.mark.e2e
def test_kill_9_while_a_fork_starts_leaves_no_half_made_run(parent, tmp_path):
    started = {}
    for delay in (0.5, 1.5, 2.5, 3.5, None):
        name = f"k{delay}"
        proc = subprocess.Popen([sys.executable, "-P", "-m", "rlab.engine.cli", "fork", "p@6", "--name", name,
                                 "--db", str(parent), "--headless", "--max-steps", "100"],
                                cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if delay is None:  # the last one is killed as soon as its run exists
            _wait(lambda: StoreReader(parent).run_by_name(name) is not None)
        else:
            time.sleep(delay)
        proc.kill()
        proc.wait(30)
        started[name] = StoreReader(parent).run_by_name(name)
    with sqlite3.connect(f"file:{parent}?mode=ro", uri=True) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    reader = StoreReader(parent)
    assert started["kNone"] is not None
    for name, row in started.items():
        if row is None:
            continue
        events = [e["kind"] for e in reader.events(row["id"])]
        assert row["config"]["fork"]["step"] == 6 and "fork" in events, name
        assert [v["version"] for v in reader.reward_versions(row["id"])] == [1], name
        assert reader.run(row["id"])["status"] == "crashed", name


def test_a_checkpoint_a_fork_started_from_is_never_pruned(tmp_path, raw_tiny_model_dir):
    rows = [Checkpoint(1, 3, Path("s3"), None, forked=True), Checkpoint(2, 6, Path("s6"), None),
            Checkpoint(3, 9, Path("s9"), None)]
    assert [c.step for c in to_prune(rows, keep_last=1)] == [6]
    db = tmp_path / "k.db"
    run(_config(db, raw_tiny_model_dir, max_steps=3, keep_checkpoints=1, eval_every=100))
    run(RunConfig(db=db, fork_from="p@3", name="child", max_steps=1))
    run(RunConfig(db=db, resume="p", max_steps=9))
    kept = StoreReader(db).checkpoints(1)
    assert [c["step"] for c in kept] == [3, 9] and Path(kept[0]["path"]).is_dir()


@pytest.mark.e2e
def test_compare_pairs_a_fork_and_its_parent_at_matched_held_out_steps(parent, tmp_path):
    run(RunConfig(db=parent, fork_from="p@3", name="hot", temperature=1.5, max_steps=5))
    done = _rlab("compare", "p", "hot", "--db", parent, "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["comparable"] and result["from_step"] == 3
    assert [s["step"] for s in result["steps"]] == [4, 6, 8] and {s["n"] for s in result["steps"]} == {16}
    assert all(0 <= s["mcnemar_p"] <= 1 for s in result["steps"])
    longer = _rlab("fork", "p@3", "--name", "long", "--db", parent, "--headless", "--max-new-tokens", "9",
                   "--max-steps", "4", cwd=tmp_path)
    assert longer.returncode == 0, longer.stderr
    refused = _rlab("compare", "p", "long", "--db", parent, cwd=tmp_path)
    assert refused.returncode == 1 and "held_out.max_new_tokens" in refused.stderr


def _wait(predicate, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


def _last_step(db, name) -> int:
    try:
        run = StoreReader(db).run_by_name(name)
    except Exception:  # the engine may still be creating the file
        return -1
    return -1 if run is None or run["last_step"] is None else run["last_step"]


# -- whether a change helps, on the shipped warm-started policies (slow: python -m pytest -m slow tests/test_fork.py) --


def _events(db, name, kinds):
    reader = StoreReader(db)
    row = reader.run_by_name(name)
    return [] if row is None else [e for e in reader.events(row["id"]) if e["kind"] in kinds]


@pytest.mark.slow
def test_a_reward_fix_forked_at_the_first_hack_alert_beats_the_run_that_did_not_get_it(tmp_path):
    """README "Test a change against its control": the alert pauses the run, the fix is forked from
    its latest checkpoint, the run resumes, and both branches train 40 more steps at once, headless."""
    from rlab.store.control import send_command

    db = tmp_path / "ab.db"
    parent = subprocess.Popen([sys.executable, "-P", "-m", "rlab.engine.cli", "run", "--headless", "--scenario",
                               "reward_hacking", "--db", str(db), "--name", "hack", "--max-steps", "60",
                               "--checkpoint-every", "2", "--eval-every", "10", "--alert", "pause_on=hack,length_drift"],
                              cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: db.exists() and _events(db, "hack", {"pause"}) != [], timeout=600)
        [alert] = _events(db, "hack", {"alert"})
        fork = subprocess.Popen([sys.executable, "-P", "-m", "rlab.engine.cli", "fork", "hack@latest", "--name", "fixed",
                                 "--db", str(db), "--headless", "--rewards",
                                 str(ROOT / "scenarios" / "reward_hacking" / "rewards_fixed.py"),
                                 "--max-steps", "40"],
                                cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait(lambda: StoreReader(db).run_by_name("fixed") is not None, timeout=300)
        # the run that did not get the fix goes on, pausing on no further alert (rlab set applies it while paused)
        quiet = _rlab("set", "hack", "alert.pause_on=", "--db", db, cwd=tmp_path)
        assert quiet.returncode == 0, quiet.stderr
        send_command(db, 1, "resume")
        _, fork_err = fork.communicate(timeout=900)
        assert fork.returncode == 0, fork_err
        _, err = parent.communicate(timeout=900)
        assert parent.returncode == 0, err
    finally:
        parent.kill()
    done = _rlab("compare", "hack", "fixed", "--db", db, "--json", cwd=tmp_path)
    result = json.loads(done.stdout)
    print(json.dumps({"alert": alert["payload"]["alert"], "alert_step": alert["step"],
                      "fork_step": result["from_step"], "steps": result["steps"],
                      "pooled": [result["pooled_a"], result["pooled_b"]], "interval": result["interval"]}))
    last = result["steps"][-1]
    assert result["comparable"] and result["from_step"] <= alert["step"] and last["step"] >= alert["step"] + 30
    assert last["pass_at_1_b"] > last["pass_at_1_a"] and last["mcnemar_p"] < 0.05


@pytest.mark.slow
def test_a_collapsed_run_rewound_a_tenth_of_the_lr_at_a_time_regains_its_best(tmp_path):
    """The collapse test's learning rate (0.05, a hundred times the tiny policy's) destroys it on its
    first update. The collapse alert names the rewind: its best checkpoint (here its start), a tenth of
    the rate. 0.005 is still ten times the policy's own and collapses it again; that fork's alert names
    the next rewind (0.0005), which holds its best within 30 steps."""
    db = tmp_path / "burn.db"
    burn = _rlab("run", "--headless", "--db", db, "--name", "burn", "--lr", "0.05", "--lr-warmup-steps", "0",
                 "--max-steps", "8", "--checkpoint-every", "1", "--eval-every", "1", "--eval-size", "100",
                 "--alert", "pause_on=", cwd=tmp_path, timeout=600)
    assert burn.returncode == 0, burn.stderr
    best = max(m["eval/pass_at_1"] for m in StoreReader(db).step_metrics(1) if "eval/pass_at_1" in m)
    figures, run = {"best": best}, "burn"
    for lr in ("0.005", "0.0005"):
        [collapse, *_] = [e for e in _events(db, run, {"alert"}) if e["payload"]["alert"] == "collapse"]
        hint = collapse["payload"]["message"].split("rewind: ", 1)[1]
        assert hint == f"rlab fork {run}@best --name {run}-rewind --lr {lr} --lr-warmup-steps 10 --db {db}"
        rewound = _rlab(*hint.split()[1:], "--headless", "--max-steps", "30", "--eval-every", "5", cwd=tmp_path,
                        timeout=600)
        assert rewound.returncode == 0, rewound.stderr
        run = f"{run}-rewind"
        figures[lr] = json.loads(rewound.stdout.strip().splitlines()[-1])["eval_curve"]
    print(json.dumps(figures))
    last = figures["0.0005"][-1][1]
    assert figures["0.005"][-1][1] < best - 0.05  # a tenth of 0.05 is still too much: it collapsed again
    assert last >= best - 0.05, figures


# -- the TUI: the tree, the parent beside the fork, f and o -------------------------------------------


@pytest.fixture(scope="module")
def tree(tmp_path_factory, raw_tiny_model_dir):
    """A parent (8 steps, checkpoints at 3, 6, 8) and a fork of it at step 3 with another lr."""
    db = tmp_path_factory.mktemp("tree") / "t.db"
    run(_config(db, raw_tiny_model_dir))
    run(RunConfig(db=db, fork_from="p@3", name="child", lr=1e-4, max_steps=5))
    return db


async def test_the_runs_screen_shows_each_fork_under_its_parent(tree):
    from textual.widgets import DataTable

    from rlab.tui.app import RolloutLabApp
    from rlab.tui.runs import RunsScreen

    app = RolloutLabApp(tree, run_id=1)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("r")
        await _until(pilot, lambda: isinstance(app.screen, RunsScreen)
                     and app.screen.query_one(DataTable).row_count == 2)
        names = [str(app.screen.query_one(DataTable).get_row_at(i)[2]) for i in range(2)]
        assert names == ["p", "└ @3 child"]


async def test_a_fork_is_drawn_beside_its_parent_with_its_fork_step_marked(tree):
    from rlab.tui.app import RolloutLabApp
    from rlab.tui.plots import MetricPlot

    app = RolloutLabApp(tree, run_id=2)
    async with app.run_test(size=(120, 40)) as pilot:
        dashboard = app.screen
        await _until(pilot, lambda: dashboard.baseline is not None and app.feed is not None and app.feed.marks)
        assert (dashboard.baseline.name, dashboard.baseline.label) == ("p", "parent")
        assert [(m["kind"], m["step"]) for m in app.feed.marks][0] == ("fork", 3)
        plot = dashboard.query(MetricPlot).first()
        await _until(pilot, lambda: plot._last is not None and plot._last[2] is not None)
        assert plot._last[3] == "parent"


@pytest.mark.e2e
async def test_f_forks_the_watched_run_from_the_checkpoint_under_the_cursor(tree):
    from textual.widgets import Input

    from rlab.tui.app import RolloutLabApp
    from rlab.tui.change_dialogs import ForkScreen

    app = RolloutLabApp(tree, run_id=1)
    async with app.run_test(size=(120, 40)) as pilot:
        await _until(pilot, lambda: app.view is not None and app.cursor.step == 8)
        for _ in range(3):
            await pilot.press("left_square_bracket")  # the cursor to step 5: the fork starts at 3
        await _until(pilot, lambda: app.cursor.step == 5)
        await pilot.press("f")
        await _until(pilot, lambda: isinstance(app.screen, ForkScreen))
        assert app.screen.step == 3 and app.screen.query_one("#fork-name", Input).has_focus
        await pilot.press(*"x", "tab", "shift+tab", *"y")  # issue 47, 4: typing after a tab replaced the name
        assert app.screen.query_one("#fork-name", Input).value == "p-3bxy"
        app.screen.query_one("#fork-name", Input).value = "p-3b"
        await pilot.press("tab", *"--lr -1", "enter")  # refused in the dialog, nothing started
        await _until(pilot, lambda: "must be greater than 0" in str(app.screen.query_one("#fork-error").render()))
        app.screen.query_one("#fork-options", Input).value = "--lr 2e-4 --max-steps 5"
        await pilot.press("enter")
        await _until(pilot, lambda: not isinstance(app.screen, ForkScreen), timeout=60)
    _wait(lambda: StoreReader(tree).run_by_name("p-3b") is not None, timeout=120)
    forked = StoreReader(tree).run_by_name("p-3b")
    assert forked["fork_step"] == 3 and forked["config"]["fork"]["changes"] == {"lr": 2e-4, "max_steps": 5}


async def test_o_refuses_a_setting_that_cannot_change_and_sends_nothing(tree):
    from textual.widgets import Input

    from rlab.store.writer import StoreWriter
    from rlab.tui.app import RolloutLabApp
    from rlab.tui.change_dialogs import SettingsScreen

    with StoreWriter(tree) as writer:
        writer.set_status(1, "paused")  # as if its engine waited at a step boundary
    app = RolloutLabApp(tree, run_id=1)
    async with app.run_test(size=(120, 40)) as pilot:
        await _until(pilot, lambda: app.run_row is not None)
        await pilot.press("o")
        await _until(pilot, lambda: isinstance(app.screen, SettingsScreen))
        assert app.screen.query_one(Input).has_focus
        said = str(app.screen.query_one("#settings-box").children[0].render())
        assert "lr, temperature" in said and "alert.NAME" in said  # our engine's, as the run's trainer
        await pilot.press(*"group_size=2", "enter")
        await _until(pilot, lambda: "group_size cannot change" in str(app.screen.query_one("#settings-error").render()))
    assert StoreReader(tree).commands(1) == []


async def test_o_on_a_trl_run_names_what_its_trainer_takes(tmp_path):
    """TrainerSettings declared what a TRL run takes between steps, but the dialog listed the
    engine's settings (temperature among them, which a TRL run refuses)."""
    from rlab.store.writer import StoreWriter
    from rlab.tui.app import RolloutLabApp
    from rlab.tui.change_dialogs import SettingsScreen

    db = tmp_path / "trl.db"
    with StoreWriter(db) as writer:
        writer.start_run("grpo", "trl", {"learning_rate": 1e-5}, {})
    app = RolloutLabApp(db, run_id=1)
    async with app.run_test(size=(120, 40)) as pilot:
        await _until(pilot, lambda: app.run_row is not None)
        await pilot.press("o")
        await _until(pilot, lambda: isinstance(app.screen, SettingsScreen))
        said = str(app.screen.query_one("#settings-box").children[0].render())
        assert "(lr, beta; not temperature, max_new_tokens" in said and "alert.NAME" not in said


async def test_the_compare_screen_pairs_a_fork_and_its_parent_at_matched_steps(tree):
    from textual.widgets import DataTable

    from rlab.tui.app import RolloutLabApp
    from rlab.tui.compare import CompareScreen

    app = RolloutLabApp(tree, run_id=1)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause(0.2)
        app.push_screen(CompareScreen(1, 2))
        await _until(pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.branches is not None)
        table = app.screen.query_one("#flips", DataTable)
        assert [str(table.get_row_at(i)[0]) for i in range(table.row_count)] == ["4", "6", "8"]
        assert "two training runs, one held-out room" in str(app.screen.query_one("#verdict").render())


async def _until(pilot, condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        await pilot.pause(0.05)


@pytest.mark.e2e
def test_an_alert_s_step_keeps_a_checkpoint_a_fork_can_start_from(tmp_path, raw_tiny_model_dir):
    """Issue 47, 3: with the defaults (--checkpoint-every 50, --keep-checkpoints 3) a fork at an
    alert's step 16 was refused; the engine now keeps a checkpoint of every alert's step."""
    db = tmp_path / "a.db"
    run(_config(db, raw_tiny_model_dir, max_steps=3, checkpoint_every=100, keep_checkpoints=1, eval_every=100,
                alerts={"no_signal_steps": 1, "no_signal_share": 0.5, "pause_on": []}))
    reader = StoreReader(db)
    [alert] = [e for e in reader.events(1) if e["kind"] == "alert" and e["payload"]["alert"] == "no_signal"]
    kept = {c["step"]: c for c in reader.checkpoints(1)}
    assert alert["step"] in kept and Path(kept[alert["step"]]["path"]).is_dir()
    done = _rlab("fork", f"p@{alert['step']}", "--name", "at-alert", "--db", db, "--headless", "--max-steps", "1",
                 cwd=tmp_path)
    assert done.returncode == 0, done.stderr


def test_the_tui_offers_the_fork_points_the_command_line_takes(parent, tmp_path):
    """Issue 47, 3: `f` before the first checkpoint said "no checkpoint yet" while `rlab fork` took @0."""
    from rlab.tui.change_dialogs import fork_point

    with StoreReader(parent) as reader:
        run_id = reader.run_by_name("p")["id"]
        assert [fork_point(reader, run_id, s) for s in (0, 2, 5, 8)] == [0, 0, 3, 8]


def test_a_fork_whose_checkpoint_the_parent_prunes_meanwhile_looks_again_once(tmp_path, raw_tiny_model_dir,
                                                                               monkeypatch, capsys):
    """Issue 47, 3: a fork racing the parent's pruning failed with "not a complete checkpoint:
    optimizer.pt is missing"; it now plans again once (@latest then names the next newest)."""
    import shutil

    from rlab.engine.run import start as start_module
    from rlab.store.writer import StoreWriter

    db = tmp_path / "p.db"
    run(_config(db, raw_tiny_model_dir, max_steps=6, keep_checkpoints=0))
    planned = start_module.plan_fork

    def plan_then_prune(config):
        plan = planned(config)
        if not calls:
            calls.append(plan.point.step)
            with StoreWriter(db) as writer:  # what the parent's pruning does: the row, then the files
                [row] = [c for c in writer.checkpoints(1) if c["step"] == plan.point.step]
                writer.forget_checkpoint(1, row["id"])
            shutil.rmtree(plan.point.path)
        return plan

    calls: list[int] = []
    monkeypatch.setattr(start_module, "plan_fork", plan_then_prune)
    run(RunConfig(db=db, fork_from="p@latest", name="racer", max_steps=1))
    assert calls == [6] and StoreReader(db).run_by_name("racer")["fork_step"] == 3
    assert "pruned checkpoint p@6 while this fork read it" in capsys.readouterr().err


def test_a_pinned_checkpoint_is_listed_once():
    """A newcomer's refused fork listed "its checkpoints: 16, 21, 25, 25, 50": the collapse alert
    pinned step 25 and the reward edit after it pinned the same step again (a second row)."""
    from pathlib import Path

    from rlab.engine.run.fork import CheckpointRef, _listed

    run = {"name": "r", "config": {}}
    stored = [CheckpointRef(run, step, Path(f"/c/{step}")) for step in (16, 21, 25, 25, 50)]
    assert _listed(stored, CheckpointRef(run, 0, None, stored=False)) == "16, 21, 25, 50 (and its start, @0)"
