"""`rlab watch --follow DIR`: the background importer fills a run while the
TUI shows it, one step file at a time."""

from __future__ import annotations

import shutil

from textual.widgets import DataTable

from rlab.store.formats.follow import Follower
from rlab.store.reader import StoreReader
from rlab.engine.cli.main import main
from rlab.engine.cli.watch import follower_command
from rlab.tui.app import RolloutLabApp
from test_formats_import import FIXTURES, _run_rows
from test_tui_app import SIZE, until


def test_follower_imports_stable_files_once_each(tmp_path):
    source = tmp_path / "dumps"
    source.mkdir()
    shutil.copy(FIXTURES / "verl" / "1.jsonl", source)
    follower = Follower(source, tmp_path / "r.db", "live", "verl")
    assert follower.poll() == 0  # seen once: may still be being written
    assert follower.poll() == 1
    assert follower.poll() == 0  # never twice
    (source / "2.jsonl").write_text((FIXTURES / "verl" / "2.jsonl").read_text()[:20])
    assert follower.poll() == 0
    shutil.copy(FIXTURES / "verl" / "2.jsonl", source)  # the writer finished it
    assert follower.poll() == 0 and follower.poll() == 1
    follower.close()
    rows = _run_rows(tmp_path / "r.db", follower.run_id)
    assert [r["completion"] for r in rows] == ["2", "3", "4", "4", "6", "7"]
    with StoreReader(tmp_path / "r.db") as reader:
        assert reader.run(follower.run_id)["status"] == "finished"


async def test_watch_follow_shows_groups_as_files_arrive(tmp_path):
    source = tmp_path / "dumps"
    source.mkdir()
    shutil.copy(FIXTURES / "verl" / "1.jsonl", source)
    db = tmp_path / "r.db"
    app = RolloutLabApp(db, run_name="live", engine_cmd=follower_command(source, db, "live"))
    try:
        async with app.run_test(size=SIZE) as pilot:
            groups = lambda: app.screen.query_one("#groups", DataTable).row_count  # noqa: E731
            await until(pilot, lambda: app.feed is not None and groups() == 2, timeout=60)
            shutil.copy(FIXTURES / "verl" / "2.jsonl", source)
            await until(pilot, lambda: groups() == 3, timeout=60)
            assert app.run_row["name"] == "live"
    finally:
        if app.engine is not None:
            app.engine.terminate()
            app.engine.wait(timeout=30)


def test_watch_follow_of_a_missing_folder_is_an_error_line(tmp_path, capsys):
    assert main(["watch", "--follow", str(tmp_path / "nope"), "--db", str(tmp_path / "r.db")]) == 2
    assert capsys.readouterr().err.startswith(f"rlab: error: --follow '{tmp_path / 'nope'}': no such folder")


def test_stop_command_ends_the_follow_and_others_are_rejected(tmp_path):
    from rlab.store.control import send_command

    source = tmp_path / "dumps"
    source.mkdir()
    follower = Follower(source, tmp_path / "r.db", "live", "verl")
    send_command(tmp_path / "r.db", follower.run_id, "pause")
    assert follower.stop_requested() is False
    send_command(tmp_path / "r.db", follower.run_id, "stop")
    follower.run(interval=0.01, idle_exit=30)  # returns at once: stop was asked
    with StoreReader(tmp_path / "r.db") as reader:
        assert [c["status"] for c in reader.commands(follower.run_id)] == ["rejected", "applied"]
        assert reader.run(follower.run_id)["status"] == "finished"
