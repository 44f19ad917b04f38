"""``rlab runs``, ``export``, ``import`` and ``index``: the runs in a file, and files in and out of it."""

from __future__ import annotations

import argparse
import json
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING

from rlab.engine.cli.errors import CliError
from rlab.engine.cli.parsers import Command, Subparsers, add_db

if TYPE_CHECKING:
    import sqlite_utils


def add_parsers(sub: Subparsers) -> None:
    """Add ``runs``, ``export``, ``import`` and ``index`` to ``sub``."""
    from rlab.store.formats import FORMATS
    from rlab.store.formats.export import EXPORT_FORMATS

    runs = sub.add_parser("runs", help="list the runs in a file")
    add_db(runs)
    runs.add_argument("--json", action="store_true", help="print a JSON list")
    export = sub.add_parser("export", help="write results.jsonl, summary.json and manifest.json")
    export.add_argument("run", help="run name or id")
    export.add_argument("--out", type=Path, required=True)
    add_db(export)
    export.add_argument("--format", choices=["rlab", *EXPORT_FORMATS], default="rlab",
                        help="rlab: results.jsonl/summary.json/manifest.json; or another tool's layout")
    imp = sub.add_parser("import", help="turn another tool's artifacts (TRL, verifiers, ART, Inspect, verl) into a run")
    imp.add_argument("path", type=Path, help="the file or folder the other tool wrote")
    add_db(imp)
    imp.add_argument("--name", help="run name (default: from the path and format)")
    imp.add_argument("--format", choices=list(FORMATS),
                     help="force a format (default: detected from the files)")
    index = sub.add_parser("index", help="build a text index of the file's completions, so `/` in the TUI "
                           "finds text in every trajectory at once (the file grows: docs/results.md)")
    add_db(index)


def cmd_runs(args: argparse.Namespace) -> int:
    from rlab.store.export import list_runs
    from rlab.engine.cli.formatting import run_tree, tree_name

    runs = list_runs(args.db)
    if args.json:
        print(json.dumps(runs))
        return 0
    if not runs:
        print(f"no runs in {args.db}")
    for r, depth in run_tree(runs):
        final = r.get("final_pass_at_1")
        shown = "-" if final is None else f"{final:.3f}"
        alerts = f"  alerts {r['alerts']} (last: {r['last_alert']})" if r["alerts"] else ""
        name = tree_name(r, depth)
        print(f"{r['id']:>4}  {name:<36} {r['kind']:<6} {r['scenario']:<14} {r['status']:<9} "
              f"steps {r['steps']:>6}  pass@1 {shown}{alerts}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from rlab.store.export import export_run
    from rlab.store.formats.export import export_as

    if args.format == "rlab":
        written = export_run(args.db, args.run, args.out)
    else:
        written = export_as(args.db, args.run, args.out, args.format)
    print(json.dumps({k: str(v) for k, v in written.items()}))
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from rlab.store.formats import import_path

    print(json.dumps(asdict(import_path(args.path, args.db, name=args.name, format=args.format))))
    return 0


def cmd_index(args: argparse.Namespace) -> int:
    """``rlab index``: build the file's text index (``store.textindex``), once,
    and print how long it took and how much the file grew.

    Raises:
        CliError: a run's engine writes the file (the build holds its write
            lock for minutes on gigabytes, which would stop the run), or
            another process held the write lock for ``BUSY_TIMEOUT_S``.
    """
    from rlab.store.db import BUSY_TIMEOUT_S, check_run_file, existing_run_file, open_db
    from rlab.store.textindex import build_text_index
    from rlab.store.filesize import file_bytes, human_bytes

    check_run_file(existing_run_file(args.db), writable=True)
    db = open_db(args.db, create=False)
    try:
        _refuse_live_runs(db, args.db)
        before = file_bytes(args.db)
        seconds = build_text_index(db)
    except sqlite3.OperationalError as err:
        if "locked" not in str(err):
            raise
        raise CliError(f"another process held {args.db}'s write lock for {BUSY_TIMEOUT_S:.0f} s "
                       "(an import, or a run of another host?); index it when nothing writes the file") from None
    finally:
        db.close()  # the last connection: its WAL goes into the file, so the size below is the file's
    if seconds is None:
        print(f"{args.db} has a text index already; `/` in the TUI searches through it")
    else:
        after = file_bytes(args.db)
        print(f"indexed the completions of {args.db} in {seconds:.1f} s; the file grew by "
              f"{human_bytes(after - before)} to {human_bytes(after)}; `/` in the TUI now finds text in "
              "every trajectory through the index")
    return 0


def _refuse_live_runs(db: sqlite_utils.Database, path: Path) -> None:
    """Raise CliError naming the first run whose engine is alive and writes ``db``."""
    from rlab.store.db import run_owner_alive

    live = [run["name"] for run in db.query("SELECT * FROM runs") if run_owner_alive(run)]
    if live:
        raise CliError(f"run {live[0]} is writing {path}, and building the index would stop it "
                       f"(it locks the file for minutes); index it when the run has ended, or stop it: "
                       f"rlab stop {live[0]} --db {path}")


#: This group's handlers by command name.
COMMANDS: dict[str, Command] = {"runs": cmd_runs, "export": cmd_export, "import": cmd_import, "index": cmd_index}
