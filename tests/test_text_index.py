"""The opt-in text index (issue 39): `rlab index` builds it, a trigger keeps it
current, and StoreReader.search finds through it what the scan finds."""

import os
import sqlite3

import pytest

from rlab.store.reader import StoreReader
from rlab.store.search import search
from rlab.store.textindex import build_text_index
from rlab.store.writer import StoreWriter
from rlab.engine.cli import main as cli
from test_store_helpers import make_group

QUERIES = ["(TRY 3)", "try", "= 82 (try 1", "100%", "37_", 'say "82"', "Answer with", "What is 37", "ry", "3"]
"""ASCII case, the completion, LIKE's % and _ and FTS5's quote taken literally, the prompt only,
both, text under three characters (a scan)."""


def main(*argv: str) -> int:
    return cli.main(list(argv))


def test_search_through_the_index_finds_what_the_scan_finds(tmp_path):
    path = tmp_path / "runs.db"
    with StoreWriter(path) as writer:
        run_id = writer.start_run("r1", "arithmetic", {}, {})
        other = writer.start_run("r2", "arithmetic", {}, {})
        for step in range(3):
            writer.write_groups(run_id, step, [make_group(i, size=4) for i in range(2)])
        writer.write_groups(other, 0, [make_group(0, size=4)])
        with StoreReader(path) as reader:
            scanned = {text: reader.search(run_id, text, limit=30).rows for text in QUERIES}
            assert not reader.uses_text_index("try 3")
        assert build_text_index(writer.database) is not None
        assert build_text_index(writer.database) is None  # built once
        writer.write_groups(run_id, 3, [make_group(0, size=4, completion_of=lambda j: f"late {j} zebra")])
    with StoreReader(path) as reader:
        assert reader.uses_text_index("try 3") and not reader.uses_text_index("ry")
        for text in QUERIES:
            found = [row for row in reader.search(run_id, text, limit=30).rows if row["step"] < 3]
            assert found == scanned[text], text
        assert len(scanned["(TRY 3)"]) == 6 and scanned["100%"] == [] and len(scanned["Answer with"]) == 24
        found = reader.search(run_id, "ZEBRA", limit=3)  # written after the build: the trigger indexed it
        # stopped at the limit: it read back to the oldest of them, and goes on from there
        assert found.indexed and found.reached_step == 3 and found.continue_before == found.rows[-1]["id"]
        late = found.rows
        assert [(row["step"], row["completion"]) for row in late] == [(3, "late 3 zebra"), (3, "late 2 zebra"),
                                                                       (3, "late 1 zebra")]


def test_rlab_index_builds_it_once_and_not_under_a_live_run(tmp_path, capsys):
    path = tmp_path / "runs.db"
    with StoreWriter(path) as writer:
        run_id = writer.start_run("r1", "arithmetic", {}, {})
        writer.write_groups(run_id, 0, [make_group(0, size=4)])
        writer.db.execute("UPDATE runs SET pid = ? WHERE id = ?", [os.getppid(), run_id])  # another live process
    assert main("index", "--db", str(path)) == 2
    assert "run r1 is writing" in capsys.readouterr().err
    with StoreWriter(path) as writer:
        writer.set_status(run_id, "stopped")
    assert main("index", "--db", str(path)) == 0
    assert "indexed the completions" in capsys.readouterr().out
    assert main("index", "--db", str(path)) == 0
    assert "has a text index already" in capsys.readouterr().out
    with StoreReader(path) as reader:
        assert reader.uses_text_index("try") and len(reader.search(run_id, "try 1").rows) == 1


def test_rlab_index_names_another_writer_holding_the_file(tmp_path, capsys, monkeypatch):
    path = tmp_path / "runs.db"
    with StoreWriter(path) as writer:
        writer.start_run("r1", "arithmetic", {}, {})
    monkeypatch.setattr("rlab.store.db.BUSY_TIMEOUT_S", 0.2)
    holder = sqlite3.connect(path)
    holder.execute("BEGIN IMMEDIATE")  # an import, say, in the middle of its transaction
    try:
        assert main("index", "--db", str(path)) == 2
    finally:
        holder.rollback()
        holder.close()
    err = capsys.readouterr().err
    assert "another process held" in err and "index it when nothing writes the file" in err
    assert main("index", "--db", str(path)) == 0


@pytest.mark.parametrize("text", ["", "ab"])
def test_the_index_never_answers_text_shorter_than_a_trigram(tmp_path, text):
    path = tmp_path / "runs.db"
    with StoreWriter(path) as writer:
        build_text_index(writer.database)
    with StoreReader(path) as reader:
        assert not reader.uses_text_index(text)


def test_a_scan_out_of_time_says_how_far_it_read_and_goes_on_from_there(tmp_path):
    """Issue 47, 7: a search keeps to its budget at any size: a scan reads newest first, window
    by window, says how far back it read, and the next search goes on from there."""
    path = tmp_path / "runs.db"
    with StoreWriter(path) as writer:
        run_id = writer.start_run("r1", "arithmetic", {}, {})
        for step in range(6):
            writer.write_groups(run_id, step, [make_group(i, size=4) for i in range(2)])
    conn = sqlite3.connect(path)
    whole = search(conn, run_id, "try 3", limit=100)
    assert not whole.indexed and len(whole.rows) == 12 and whole.continue_before is None
    assert whole.reached_step == 0
    pieces, before = [], None
    while True:  # no time at all: one window of 8 trajectories a search
        part = search(conn, run_id, "try 3", limit=100, before=before, budget_s=0.0, window=8)
        pieces += part.rows
        assert len(part.rows) == 2 and part.reached_step == part.rows[-1]["step"]
        if part.continue_before is None:
            break
        before = part.continue_before
    assert pieces == whole.rows


def test_text_the_index_cannot_narrow_in_time_is_scanned(tmp_path, monkeypatch):
    """Text of trigrams most completions hold took 1.4-2.2 s through the index on 3 GB: past half
    the budget the query is interrupted and the search scans, and says so."""
    path = tmp_path / "runs.db"
    with StoreWriter(path) as writer:
        run_id = writer.start_run("r1", "arithmetic", {}, {})
        for step in range(6):
            writer.write_groups(run_id, step, [make_group(i, size=4) for i in range(2)])
        build_text_index(writer.database)
    conn = sqlite3.connect(path)
    exact = search(conn, run_id, "try 3", limit=100, budget_s=10.0)
    assert exact.indexed and not exact.index_timed_out and len(exact.rows) == 12
    monkeypatch.setattr("rlab.store.search.PROGRESS_OPCODES", 1)  # the deadline checked at every step
    timed_out = search(conn, run_id, "try 3", limit=100, budget_s=0.0, window=8)
    assert timed_out.index_timed_out and not timed_out.indexed and len(timed_out.rows) == 2
    assert timed_out.continue_before is not None
