"""Issue 59's small command-line items: compare, export summary, fork, set, stop, a paused run's beat."""

from __future__ import annotations

import json

import pytest

from rlab.engine.cli.main import main
from rlab.store.writer import StoreWriter

MANIFEST = {"dataset": {"name": "calc", "eval_sha256": "ab" * 32}, "prompt": {"system": "Use the tools."},
            "scorer": {"success": "correct >= 1"}, "tools": {"offered": True}}
CONFIG = {"eval_size": 4, "max_new_tokens": 8, "seed": 0}
EXAMPLES = ["e0", "e1", "e2", "e3"]


def _trained(writer: StoreWriter, name: str, evals: dict[int, list[int]], *, offered: bool = True) -> int:
    """A training run whose held-out evals at each step of ``evals`` passed those examples (1 / 0)."""
    run_id = writer.start_run(name, "calculator", CONFIG, {**MANIFEST, "tools": {"offered": offered}})
    for step, passed in evals.items():
        writer.write_event(run_id, "eval", {"example_ids": EXAMPLES, "passed": passed}, step=step)
    writer.set_status(run_id, "finished")
    return run_id


@pytest.fixture
def arms(tmp_path):
    """Two training arms started alike (neither a fork of the other), and a third that never evaluated."""
    db = tmp_path / "arms.db"
    with StoreWriter(db) as writer:
        _trained(writer, "calc-tools", {0: [0, 0, 0, 0], 10: [1, 1, 0, 1], 20: [1, 1, 1, 1]})
        _trained(writer, "calc-notools", {0: [0, 0, 0, 0], 10: [0, 0, 0, 0], 20: [0, 1, 0, 0]}, offered=False)
        _trained(writer, "no-evals", {})
    return db


def _rlab(capsys, *args) -> tuple[int, str, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def test_compare_two_training_arms_pairs_their_held_out_evals(arms, capsys):
    """README's `rlab compare` of two arms printed "trained (kind train): ... not a measurement" and exited 0."""
    code, out, err = _rlab(capsys, "compare", "calc-tools", "calc-notools", "--db", arms, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["comparable"] and result["from_step"] == 0
    assert [(s["step"], s["pass_at_1_a"], s["pass_at_1_b"]) for s in result["steps"]] == [(10, 0.75, 0.0),
                                                                                          (20, 1.0, 0.25)]
    assert [d["field"] for d in result["treatments"]] == ["tools.offered"]
    code, out, err = _rlab(capsys, "compare", "calc-tools", "calc-notools", "--db", arms)
    assert code == 0 and "held-out pass@1 at the steps after 0 both evaluated" in out, err


def test_compare_with_nothing_to_pair_is_one_error_line_naming_the_fix(arms, capsys):
    code, out, err = _rlab(capsys, "compare", "calc-tools", "no-evals", "--db", arms)
    assert code == 2 and out == ""
    [line] = err.strip().splitlines()
    assert line.startswith("rlab: error: runs 'calc-tools' and 'no-evals': no step after 0 has a held-out eval")
    assert "--eval-every" in line and "rlab eval --checkpoint RUN@STEP" in line
    code, out, err = _rlab(capsys, "compare", "calc-tools", "calc-notools", "--from-step", "20", "--db", arms)
    assert code == 2 and out == "" and "no step after 20" in err


def test_compare_of_a_run_with_itself_is_refused(arms, capsys):
    code, out, err = _rlab(capsys, "compare", "calc-tools", "1", "--db", arms)
    assert code == 2 and out == ""
    [line] = err.strip().splitlines()
    assert line == ("rlab: error: 'calc-tools' and '1' are the same run (calc-tools); compare it with another run "
                    "(rlab runs lists them)")


def _group(index: int, answers: list[tuple[str, float, bool | None]]):
    """A single-turn group of (parse_status, reward, success) trajectories."""
    from rlab.store.records import GroupRecord, TrajectoryRecord

    trajectories = [TrajectoryRecord(index=i, messages=[{"role": "user", "content": "6*7?"},
                                                        {"role": "assistant", "content": "42"}],
                                     completion="42", reward=reward, components={"correct": reward or 0.0},
                                     details={"parse_status": status}, advantage=0.0, reward_version=1,
                                     success=success)
                    for i, (status, reward, success) in enumerate(answers)]
    return GroupRecord(index=index, example_id=f"ex-{index}", prompt="6*7?", trajectories=trajectories)


def test_export_summary_says_what_each_figure_is_over(tmp_path, capsys):
    """A training run's summary paired `n` (training trajectories) with `pass_at_1` (the last
    held-out eval), and counted a wrong answer that parsed as failure mode "ok"."""
    db = tmp_path / "t.db"
    with StoreWriter(db) as writer:
        run_id = writer.start_run("calc", "calculator", {"success": "correct"}, {})
        writer.write_groups(run_id, 0, [_group(0, [("ok", 1.0, True), ("ok", 0.0, False), ("no_answer", 0.0, False),
                                                   ("ok", 0.5, False)])])
        writer.write_step(run_id, 0, {"reward": 0.375, "eval/pass_at_1": 0.25, "eval/num_examples": 8.0,
                                      "eval/reward": 0.3})
        writer.write_groups(run_id, 1, [_group(0, [("ok", 1.0, True), ("ok", 1.0, True), ("ok", 0.0, False),
                                                   ("ok", 1.0, True)])])
        writer.write_step(run_id, 1, {"reward": 0.75})
        writer.set_status(run_id, "finished")
    assert main(["export", "calc", "--db", str(db), "--out", str(tmp_path / "out")]) == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    # n, pass_at_1 and mean_reward: all over the last held-out eval, whose step is said
    assert (summary["n"], summary["pass_at_1"], summary["mean_reward"], summary["eval_step"]) == (8, 0.25, 0.3, 0)
    assert summary["training"] == {"trajectories": 8, "pass_rate": 4 / 8, "mean_reward": 4.5 / 8}
    assert summary["failure_modes"] == {"wrong": 3, "no_answer": 1}  # the solved ones are no failure


@pytest.fixture
def live(tmp_path):
    """The small run file: ``demo`` running (owned by this process), ``gigpo-demo`` finished."""
    from fixtures.smalldb import build_small_db

    db = tmp_path / "run.db"
    return db, build_small_db(db)


def test_fork_at_an_empty_step_is_refused_naming_the_forms(live, capsys):
    """`rlab fork demo@` forked from the latest checkpoint, as if no @ had been typed."""
    db, _ = live
    code, out, err = _rlab(capsys, "fork", "demo@", "--name", "x", "--db", db, "--headless")
    assert code == 2 and out == ""
    assert err.strip() == ("rlab: error: fork 'demo@': the step after @ must be a number (a checkpoint's step), "
                           "best or latest, e.g. demo@50")


@pytest.mark.parametrize("words, error", [
    (["lr=1e-3", "lr=2e-3"], "lr is given twice (lr=1e-3, lr=2e-3); give each setting once"),
    (["max-new-tokens=5", "max_new_tokens=6"],
     "max_new_tokens is given twice (max-new-tokens=5, max_new_tokens=6); give each setting once"),
    (["alert.hack_gap=0.3", "alerts.hack_gap=0.2"],
     "alert.hack_gap is given twice (alert.hack_gap=0.3, alerts.hack_gap=0.2); give each setting once"),
], ids=["same-key", "dash-and-underscore", "alert-and-alerts"])
def test_rlab_set_refuses_a_setting_given_twice(live, capsys, words, error):
    """`rlab set RUN lr=1e-3 lr=2e-3` sent the last one without a word."""
    from rlab.store.reader import StoreReader

    db, ids = live
    code, out, err = _rlab(capsys, "set", "demo", *words, "--db", db, "--wait", "0")
    assert code == 2 and out == "" and err.strip() == f"rlab: error: {error}"
    with StoreReader(db) as reader:
        assert reader.commands(ids["demo"]) == []


def test_rlab_set_refuses_a_fixed_setting_at_the_value_it_has(live, capsys):
    """`rlab set RUN group_size=<its own>` answered "the run already has these values", as if it could change."""
    from rlab.engine.run.config import RunConfig
    from rlab.engine.run.settings import BETWEEN_STEPS

    db, _ = live
    changes_only = f"rlab set changes only: {', '.join(BETWEEN_STEPS)}"
    for value in (RunConfig().group_size, RunConfig().group_size + 1):
        code, out, err = _rlab(capsys, "set", "demo", f"group_size={value}", "--db", db, "--wait", "0")
        assert code == 2 and out == ""
        assert err.strip() == (f"rlab: error: group_size cannot change between steps; {changes_only}; a fork "
                               "changes it: rlab fork demo@latest --name NEW --group-size VALUE"), value
    code, _, err = _rlab(capsys, "set", "demo", f"lr={RunConfig().lr}", "lora_rank=0", "--db", db, "--wait", "0")
    assert code == 2 and err.strip() == f"rlab: error: lora_rank cannot change between steps; {changes_only}"


def test_a_second_rlab_stop_says_a_stop_is_pending_and_sends_nothing(live, capsys):
    """Two `rlab stop`s sent two stops, and the engine printed "stopping after step N" twice."""
    from rlab.store.reader import StoreReader

    db, ids = live
    assert _rlab(capsys, "stop", "demo", "--db", db)[1].startswith("sent stop to run demo")
    for status in ("pending", "applied"):  # read by the engine or not, it is on its way until the run ends
        if status == "applied":
            with StoreWriter(db) as writer:
                writer.resolve_command(1, "applied")
        code, out, err = _rlab(capsys, "stop", "demo", "--db", db)
        assert code == 0 and out == (f"run demo already has a stop pending (command 1, {status}); nothing sent: "
                                     "it ends at its next step boundary\n"), err
    with StoreReader(db) as reader:
        assert [(c["kind"], c["status"]) for c in reader.commands(ids["demo"])] == [("stop", "applied")]
    with StoreWriter(db) as writer:  # a resume takes the run up again: the old stop is spent
        writer.write_event(ids["demo"], "resume", {"reason": "user"}, step=7)
    assert _rlab(capsys, "stop", "demo", "--db", db)[1].startswith("sent stop to run demo (command 2")


def test_the_engine_takes_a_second_stop_without_saying_it_stops_again(live):
    from rlab.store.control import Controller, send_command
    from rlab.store.reader import StoreReader

    db, ids = live
    said: list[str] = []
    with StoreWriter(db) as writer:
        controller = Controller(writer, ids["demo"], tell=said.append)
        for _ in range(2):
            send_command(db, ids["demo"], "stop")
        controller.poll(4)
    assert controller.stop and said == ["stopping after step 4 (a stop command)"]
    with StoreReader(db) as reader:
        assert [(c["status"], c["message"]) for c in reader.commands(ids["demo"])] == [
            ("applied", None), ("applied", "a stop was already pending")]


def test_a_paused_run_beats_when_a_command_came_not_at_every_poll(live, monkeypatch):
    """A paused run wrote its heartbeat at every poll (10 a second), growing the run file's log while it waited."""
    import rlab.store.control as control

    db, ids = live
    polls: list[int] = []

    def sleep(_seconds: float) -> None:  # the wait's polls, counted: a settings change at the 20th, resume at the 40th
        polls.append(1)
        if len(polls) == 20:
            control.send_command(db, ids["demo"], "set_settings", {"changes": {"lr": 1e-4}})
        elif len(polls) == 40:
            control.send_command(db, ids["demo"], "resume")

    monkeypatch.setattr(control.time, "sleep", sleep)
    beats: list[int] = []
    with StoreWriter(db) as writer:
        controller = control.Controller(writer, ids["demo"])
        controller.pause(3, "user")

        def beat() -> None:  # as the engine's: it applies the settings changes taken
            beats.append(len(controller.pending_settings))
            controller.pending_settings.clear()

        controller.wait_while_paused(3, beat)
    assert len(polls) == 40 and not controller.paused
    assert beats == [0, 1]  # as the wait began, and once more for the settings change
