"""The opt-in text index (issue 39): `rlab index` builds it, a trigger keeps it
current, and StoreReader.search finds through it what the scan finds."""

import os
import sqlite3

import pytest

from rlab.store.reader import StoreReader
from rlab.store.textindex import build_text_index
from rlab.store.writer import StoreWriter
from rlab.tui import cli
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
            scanned = {text: reader.search(run_id, text, limit=30) for text in QUERIES}
            assert not reader.uses_text_index("try 3")
            assert len(reader.search(run_id, "(TRY 3)", limit=30, scan=4)) == 1  # the newest 4 only
        assert build_text_index(writer.database) is not None
        assert build_text_index(writer.database) is None  # built once
        writer.write_groups(run_id, 3, [make_group(0, size=4, completion_of=lambda j: f"late {j} zebra")])
    with StoreReader(path) as reader:
        assert reader.uses_text_index("try 3") and not reader.uses_text_index("ry")
        for text in QUERIES:
            found = [row for row in reader.search(run_id, text, limit=30) if row["step"] < 3]
            assert found == scanned[text], text
        assert len(scanned["(TRY 3)"]) == 6 and scanned["100%"] == [] and len(scanned["Answer with"]) == 24
        # the index reads every trajectory of the run, however few a scan would read
        assert reader.search(run_id, "(TRY 3)", limit=30, scan=4) == scanned["(TRY 3)"]
        late = reader.search(run_id, "ZEBRA", limit=3)  # written after the build: the trigger indexed it
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
        assert reader.uses_text_index("try") and len(reader.search(run_id, "try 1")) == 1


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
