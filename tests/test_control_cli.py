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
