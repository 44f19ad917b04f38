"""Opening the run file: WAL, busy timeout, migrations, crash detection."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlite_utils

from rlab.store.errors import UsageError
from rlab.store.migrations import MIGRATIONS, RUN_FILE_COLUMNS, RUN_FILE_TABLES, SCHEMA_VERSION

BUSY_TIMEOUT_S = 10.0
"""How long (seconds) a statement waits for another process's write lock."""


class SchemaVersionError(UsageError, RuntimeError):
    """The file's schema version is unusable here: newer than this code, or
    older and read-only (so it cannot be migrated)."""


class RunFileError(UsageError, RuntimeError):
    """A file that is not a usable run file (garbage, truncated, unreadable);
    the message names the file and the fix."""


class RunFileFullError(RunFileError):
    """The disk under the run file is full (SQLite's SQLITE_FULL): the write
    was rolled back; the message names the file and the fix."""


def run_file_error(path: str | Path, err: BaseException) -> RunFileError:
    """A :class:`RunFileError` for ``err`` (an ``sqlite3.DatabaseError`` or
    ``OSError`` met on ``path``), naming the file and the fix."""
    return RunFileError(
        f"{path} is not a readable Rollout Lab run file ({err}); pass --db with another file, "
        "or restore this one from a copy (move it away to start a new run file there)")


def damaged_file_error(path: str | Path, problem: str) -> RunFileError:
    """A :class:`RunFileError` for a run file whose pages are damaged
    (``problem``: what SQLite found), naming how to recover what it holds."""
    path = Path(path)
    recovered = path.with_name(f"{path.stem}-recovered{path.suffix}")
    return RunFileError(
        f"{path} is damaged: database disk image is malformed ({problem}); restore it from a copy, or salvage "
        f"what it still holds with `sqlite3 {path} .recover | sqlite3 {recovered}` (sqlite.org's sqlite3 tool: "
        f"Debian's and Ubuntu's lack .recover) and pass --db {recovered}")


def read_error(path: str | Path, err: sqlite3.DatabaseError | OSError) -> RunFileError:
    """The :class:`RunFileError` for ``err``, met reading ``path``: a damaged
    page (``SQLITE_CORRUPT``) names the damage and the recovery."""
    if getattr(err, "sqlite_errorcode", None) == sqlite3.SQLITE_CORRUPT:
        return damaged_file_error(path, str(err))
    return run_file_error(path, err)


def connect(path: str | Path, *, read_only: bool = False) -> sqlite3.Connection:
    """Open a raw connection with the busy timeout set.

    ``read_only=True`` opens with ``mode=ro`` so the connection can never take
    the write lock (a reader then never blocks the engine's writer).
    ``check_same_thread`` is off because the TUI reads from worker threads;
    callers serialise their own use of the connection.
    """
    if read_only:
        conn = _connect_read_only(Path(path))
    else:
        conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    return conn


def _connect_read_only(path: Path) -> sqlite3.Connection:
    """``mode=ro``; on read-only media (where SQLite cannot create the WAL's
    ``-shm`` file) ``immutable=1``: nothing can change the file there."""
    uri = path.resolve().as_uri()
    conn = sqlite3.connect(uri + "?mode=ro", uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
    try:
        conn.execute("PRAGMA user_version")
        return conn
    except sqlite3.OperationalError:
        if os.access(path.resolve().parent, os.W_OK):
            conn.close()
            raise
    conn.close()
    return sqlite3.connect(uri + "?immutable=1", uri=True, timeout=BUSY_TIMEOUT_S,
                           check_same_thread=False)


def existing_run_file(path: str | Path) -> Path:
    """``path`` as a Path, once a file is there (what it holds is :func:`check_run_file`'s job).

    Raises:
        FileNotFoundError: no file at ``path``; the message names ``--db`` and how to make one.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no run file at {path}; check the --db path, or start a run to create it")
    return path


def check_run_file(path: str | Path, *, writable: bool, pages: bool = True) -> None:
    """Raise, with the fix, if ``path`` cannot serve as a run file.

    A missing file passes when ``writable`` (a run creates it) if its folder
    takes a new file; an existing one must be an SQLite file of a schema this
    code reads, not another application's (:func:`refuse_foreign`), not
    shorter than its header says (a truncated copy), and, with ``pages``,
    every page must pass ``PRAGMA quick_check``. That reads the whole file (a
    quarter of a second for 200 MB, 1.7 s for 3 GB when the file is in the
    page cache, the disk's read time when not): a command that reads only
    part of the file passes ``pages=False`` and meets damage where it reads
    (:class:`~store.reader.StoreReader` reports it). Writes nothing.

    Raises:
        RunFileError: not an SQLite file, another application's, truncated,
            damaged (the message names the damage and how to recover what
            the file holds), unreadable, or the folder takes no new file.
        SchemaVersionError: the file is newer than this code.
        FileNotFoundError: no file and not ``writable``.
    """
    path = Path(path)
    if not path.exists():
        if not writable:
            existing_run_file(path)
        _check_creatable(path)
        return
    try:
        with path.open("rb") as handle:
            header = handle.read(100)
        if header and not header.startswith(b"SQLite format 3\x00"):
            raise sqlite3.DatabaseError("file is not a database")
        _check_not_truncated(path, header)
        conn = connect(path, read_only=True)
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            refuse_foreign(conn, path)
            # Damaged pages stop a run now, not mid-run, and a reader before it shows a traceback.
            problems = [line for row in conn.execute("PRAGMA quick_check(3)") for line in row[0].splitlines()
                        if not line.startswith("*** ")] if pages else ["ok"]
            if problems != ["ok"]:
                raise damaged_file_error(path, problems[0])
        finally:
            conn.close()
    except (sqlite3.DatabaseError, OSError) as err:
        raise read_error(path, err) from None
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(f"{path} has schema v{version}, newer than this Rollout Lab "
                                 f"(v{SCHEMA_VERSION}); upgrade rollout-lab to open it")
    if writable and not (os.access(path, os.W_OK) and os.access(path.resolve().parent, os.W_OK)):
        raise RunFileError(f"{path} is read-only here (a run needs to write it and its -wal beside it); "
                           "read it with `rlab runs`/`rlab export`/`rlab watch`, or copy it somewhere "
                           "writable, or pass another --db")


def _check_creatable(path: Path) -> None:
    # An unnamed file in the folder: a probe at ``path`` itself would appear and vanish,
    # and a reader polling for the run file (the TUI, a test) could open it in between.
    try:
        tempfile.TemporaryFile(dir=path.parent).close()
    except OSError as err:
        raise RunFileError(f"cannot create the run file {path}: {err.strerror}; "
                           "pass --db with a writable path") from None


def _check_not_truncated(path: Path, header: bytes) -> None:
    """Compare the file's size with the page count in its header (SQLite file
    format, section 1.3: bytes 16-17 page size, 28-31 page count, valid when
    bytes 92-95 equal the change counter at 24-27)."""
    if len(header) < 100:
        if header:
            raise sqlite3.DatabaseError(f"file is truncated ({len(header)} bytes)")
        return
    wal = path.with_name(path.name + "-wal")
    if wal.exists() and wal.stat().st_size > 0:
        return  # pages beyond the file's end may be in the write-ahead log (a checkpoint cut short by a full disk)
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(header[28:32], "big")
    if header[24:28] == header[92:96] and path.stat().st_size < pages * page_size:
        raise sqlite3.DatabaseError(
            f"file is truncated: {path.stat().st_size} bytes, its header says {pages * page_size}")


def run_owner_alive(run: Mapping[str, Any]) -> bool:
    """Whether the engine process of a ``running``/``paused`` run of this
    host is alive (so nothing else may take the run over)."""
    return (run["status"] in ("running", "paused") and run.get("host") == socket.gethostname()
            and run.get("pid") not in (None, os.getpid())
            and process_alive(run["pid"], seen_at=run.get("heartbeat_at")))


def open_db(path: str | Path, *, create: bool = True) -> sqlite_utils.Database:
    """Open (or create) a run file for writing, ready to use.

    Sets WAL journaling, ``synchronous=NORMAL`` (a commit survives a process
    kill; only an OS crash can lose the last commits, never corrupt the file),
    a busy timeout of ``BUSY_TIMEOUT_S`` seconds and foreign keys; applies
    pending migrations (``PRAGMA user_version``); marks as ``crashed`` any
    ``running``/``paused`` run whose engine process on this host is gone.

    Raises:
        FileNotFoundError: ``create=False`` and ``path`` does not exist.
        SchemaVersionError: the file's schema version is newer than this code.
        RunFileError: the file is not an SQLite file, or is damaged.
    """
    path = Path(path)
    if create:
        path.parent.mkdir(parents=True, exist_ok=True)
    else:
        existing_run_file(path)
    db = sqlite_utils.Database(connect(path))
    try:
        refuse_foreign(db, path)
        db.execute("PRAGMA foreign_keys = ON")
        if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            with db.ensure_autocommit_on():
                _switch_to_wal(db)
        db.execute("PRAGMA synchronous = NORMAL")
        migrate(db)
        mark_crashed_runs(db)
    except sqlite3.OperationalError:
        db.close()
        raise  # locked, or read-only: the caller decides (StoreReader reads it as it is)
    except sqlite3.DatabaseError as err:
        db.close()
        raise run_file_error(path, err) from None
    return db


def refuse_foreign(db: sqlite_utils.Database | sqlite3.Connection, path: Path) -> None:
    """Refuse, before anything is written, an SQLite file another application made.

    A run file is empty at schema version 0 (``PRAGMA user_version``) and
    from version 1 on holds the first schema's tables
    (``migrations.RUN_FILE_TABLES``, ``runs`` with its columns); any other
    file is another application's, whatever its tables or version. Opening
    it as ours would switch it to WAL and migrate it.

    Raises:
        RunFileError: the file is no run file (the message says what it holds).
    """
    conn = db.conn if isinstance(db, sqlite_utils.Database) else db
    with _one_snapshot(conn):
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if _is_run_file(conn, version):
            return
        tables = [row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid")]
    held = [f"tables: {', '.join(tables[:5])}{', ...' if len(tables) > 5 else ''}"] if tables else []
    held += [f"user_version {version}"] if version else []
    shown = f" ({'; '.join(held)})" if held else ""
    raise RunFileError(f"{path} is an SQLite file of another application{shown}, not a Rollout Lab run "
                       "file; it was left as it is: pass another --db")


@contextmanager
def _one_snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    """One read transaction (unless ``conn`` is in one), so reads inside it see
    one state of the file: a run opening the same new file may commit its
    first migration between two reads, and version 0 with the tables read
    after it looked like another application's file (6-12 % of the openings
    when three threads open one new file, tests/test_store.py)."""
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")


def _is_run_file(conn: sqlite3.Connection, version: int) -> bool:
    """Empty at version 0; the first schema's tables, ``runs`` with its columns, from version 1 on."""
    objects = conn.execute("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'").fetchall()
    if version == 0:
        return not objects
    tables = {name for kind, name in objects if kind == "table"}
    columns = {row[1] for row in conn.execute("PRAGMA table_info(runs)")}
    return set(RUN_FILE_TABLES) <= tables and set(RUN_FILE_COLUMNS) <= columns


def _switch_to_wal(db: sqlite_utils.Database) -> None:
    """Set WAL journaling, waiting up to ``BUSY_TIMEOUT_S`` for other openers.

    SQLite answers ``journal_mode = WAL`` with "database is locked" at once,
    without calling the busy handler, while another connection holds a lock
    on a new file: two runs started together on one new run file (the
    curves bench, or two terminals) would otherwise lose one of them.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as err:
            if err.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


@contextmanager
def write_transaction(db: sqlite_utils.Database) -> Iterator[sqlite_utils.Database]:
    """A transaction that takes the write lock when it begins (``BEGIN
    IMMEDIATE``, waiting up to ``BUSY_TIMEOUT_S`` for another writer);
    committed on exit, rolled back on an exception. Inside an open
    transaction it is a savepoint (``sqlite_utils``' ``atomic``).

    Raises:
        RunFileFullError: the disk is full (SQLITE_FULL), the transaction
            rolled back.

    A deferred ``BEGIN`` (``atomic``'s) that reads before it writes fails at
    once with "database is locked" when another process committed in
    between: in WAL mode SQLite answers that upgrade with SQLITE_BUSY_SNAPSHOT
    and never calls the busy handler (https://sqlite.org/wal.html, section
    "Sometimes Queries Return SQLITE_BUSY In WAL Mode"). Two runs writing one
    run file (the curves bench) lost a run that way while pruning a checkpoint.
    """
    if db.conn.in_transaction:
        with db.atomic():
            yield db
        return
    db.conn.execute("BEGIN IMMEDIATE")
    try:
        yield db
        db.conn.execute("COMMIT")
    except BaseException as err:
        if db.conn.in_transaction:
            db.conn.execute("ROLLBACK")
        if isinstance(err, sqlite3.OperationalError) and err.sqlite_errorcode == sqlite3.SQLITE_FULL:
            raise _full_disk_error(db) from err
        raise


def _full_disk_error(db: sqlite_utils.Database) -> RunFileFullError:
    """SQLite says only "database or disk is full": name the file and the fix."""
    path = next((row[2] for row in db.conn.execute("PRAGMA database_list") if row[1] == "main"), "")
    return RunFileFullError(f"cannot write the run file {path}: the disk is full (the last write was rolled "
                            "back, nothing stored is lost); free disk space there, or move the file to a "
                            "disk with room, then resume the run")


def schema_version(db: sqlite_utils.Database) -> int:
    """The file's ``PRAGMA user_version`` (0 for a new, empty file)."""
    return db.execute("PRAGMA user_version").fetchone()[0]


def migrate(db: sqlite_utils.Database) -> int:
    """Apply every pending migration, each in its own write transaction.

    :func:`write_transaction` takes the write lock before re-reading the version,
    so two processes opening the same old file migrate it once. Returns the
    resulting schema version.

    Raises:
        SchemaVersionError: the file is newer than ``SCHEMA_VERSION``.
    """
    version = schema_version(db)
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"run file schema v{version} is newer than this Rollout Lab (v{SCHEMA_VERSION}); "
            "upgrade rollout-lab to open it"
        )
    while version < SCHEMA_VERSION:
        with write_transaction(db):
            version = schema_version(db)
            if version < SCHEMA_VERSION:
                for statement in MIGRATIONS[version]:
                    db.conn.execute(statement)
                version += 1
                db.conn.execute(f"PRAGMA user_version = {version}")
    return version


def process_alive(pid: int, *, seen_at: float | None = None) -> bool:
    """Whether process ``pid`` exists on this host and is not a zombie.

    A zombie (killed but not yet reaped by its parent, e.g. the TUI) counts
    as dead: it will never write again. With ``seen_at`` (Unix seconds of the
    engine's last heartbeat), a process that started after it is another
    program that reused the pid (after a reboot, say): dead too.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return True
    if fields[0] == "Z":
        return False
    return seen_at is None or _started_at(int(fields[19])) <= seen_at + 1.0


def _started_at(start_ticks: int) -> float:
    """Unix time (seconds) of a process start given in clock ticks since boot
    (field 22 of /proc/PID/stat, proc(5))."""
    boot = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                if line.startswith("btime "))
    return boot + start_ticks / os.sysconf("SC_CLK_TCK")


def mark_crashed_runs(db: sqlite_utils.Database) -> list[int]:
    """Mark ``running``/``paused`` runs of this host whose pid is gone as crashed.

    Runs started on another host are left alone (their engine may be alive
    there); runs with no owner recorded (written by schema v1) count as dead;
    a pid now held by a process younger than the run's last heartbeat is a
    reused pid. Records an ``error`` event per crashed run. Returns their ids.
    """
    host = socket.gethostname()
    stale = [
        (run_id, pid)
        for run_id, pid, heartbeat_at in db.execute(
            "SELECT id, pid, heartbeat_at FROM runs WHERE status IN ('running', 'paused') "
            "AND (host = ? OR (host IS NULL AND pid IS NULL))",
            [host],
        ).fetchall()
        if pid is None or not process_alive(pid, seen_at=heartbeat_at)
    ]
    if not stale:
        return []
    now = time.time()
    with write_transaction(db):
        for run_id, pid in stale:
            # Re-check the status: another process may have marked it already.
            updated = db.execute(
                "UPDATE runs SET status = 'crashed', ended_at = ? "
                "WHERE id = ? AND status IN ('running', 'paused')",
                [now, run_id],
            ).rowcount
            if not updated:
                continue
            payload = {"message": f"engine process {pid} on {host} is gone; run marked crashed"}
            db.execute(
                "INSERT INTO events (run_id, step, kind, payload, created_at) "
                "VALUES (?, (SELECT last_step FROM runs WHERE id = ?), 'error', ?, ?)",
                [run_id, run_id, json.dumps(payload), now],
            )
    return [run_id for run_id, _ in stale]
