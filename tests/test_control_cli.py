"""``rlab pause|resume|step|stop RUN``: steer a live run from a shell, as the TUI's keys do."""

from __future__ import annotations

from fixtures.smalldb import build_small_db
from rlab.store.reader import StoreReader
from rlab.engine.cli.main import main


def test_rlab_stop_queues_a_stop_for_a_live_run_and_refuses_an_ended_one(tmp_path, capsys):
    db = tmp_path / "run.db"
    ids = build_small_db(db)  # demo is running, gigpo-demo finished
    assert main(["stop", "demo", "--db", str(db)]) == 0
    assert capsys.readouterr().out.startswith("sent stop to run demo")
    with StoreReader(db) as reader:
        assert [(c["kind"], c["status"]) for c in reader.commands(ids["demo"])] == [("stop", "pending")]
    assert main(["stop", "gigpo-demo", "--db", str(db)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("rlab: error: run gigpo-demo is finished; stop steers a running or paused run")


def test_rlab_set_names_a_value_the_run_has_already(tmp_path, capsys):
    """`rlab set RUN lr=<its lr> temperature=0.5` sends only temperature, and says lr was left."""
    from rlab.engine.run.config import RunConfig

    db = tmp_path / "run.db"
    ids = build_small_db(db)  # demo is running, with the default options
    assert main(["set", "demo", f"lr={RunConfig().lr}", "temperature=0.5", "--db", str(db), "--wait", "0"]) == 0
    out = capsys.readouterr().out
    assert "(unchanged, the run has them already: lr)" in out, out
    with StoreReader(db) as reader:
        [command] = reader.commands(ids["demo"])
    assert command["kind"] == "set_settings" and command["payload"] == {"changes": {"temperature": 0.5}}


def test_rlab_pause_of_a_paused_run_says_so_and_sends_nothing(tmp_path, capsys):
    import sqlite3

    db = tmp_path / "run.db"
    ids = build_small_db(db)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET status = 'paused' WHERE id = ?", [ids["demo"]])
    assert main(["pause", "demo", "--db", str(db)]) == 0
    assert capsys.readouterr().out.startswith("run demo is already paused; nothing sent (rlab resume demo")
    with StoreReader(db) as reader:
        assert reader.commands(ids["demo"]) == []
    assert main(["resume", "demo", "--db", str(db)]) == 0  # what it says to do is sent
    assert capsys.readouterr().out.startswith("sent resume to run demo")
