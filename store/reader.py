"""Everything the TUI reads from a run file (the TUI holds no SQL).

Every method is one short read transaction on a read-only connection: in
WAL mode readers never block the engine's writer, and a reader can never
take the write lock. Methods return plain dicts and lists; JSON columns come
back decoded; times are Unix seconds; a missing row gives None.
"""

from __future__ import annotations

import socket
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, cast

from rlab.store.db import SchemaVersionError, connect, open_db, process_alive, read_error
from rlab.store.errors import RunNotFoundError
from rlab.store.migrations import SCHEMA_VERSION
from rlab.store.records import DEFAULT_SUCCESS_THRESHOLD, STEP_METRIC_COLUMNS
from rlab.store.search import ROLLOUT_COLUMNS, Found, search, uses_text_index
from rlab.store.rows import (
    EventRow,
    GroupRow,
    InspectedTrajectoryRow,
    RunRow,
    RunSummaryRow,
    StepGroupRow,
    ToolCallRow,
    fetch_dict,
    fetch_dicts,
)

_RUN_JSON = ("config", "manifest", "summary")
_TRAJECTORY_JSON = ("messages", "components", "details")
# steps columns renamed to the metric names the engine writes (TRL names).
_SERIES_COLUMNS = ", ".join(
    f'{column} AS "{name}"' for name, column in STEP_METRIC_COLUMNS.items()
)
def _as_seen(row: dict | None) -> dict | None:
    """A run row with the status a reader sees: ``crashed`` for a running or paused
    run of this host whose engine is gone. Opening the file marks such a run
    (``store.db.mark_crashed_runs``), but a read-only copy, or a file on a full
    disk, cannot be written: the run would read ``running`` for ever."""
    if row is not None and row.get("status") in ("running", "paused") and row.get("host") == socket.gethostname() \
            and (row.get("pid") is None or not process_alive(row["pid"], seen_at=row.get("heartbeat_at"))):
        return {**row, "status": "crashed"}
    return row


def passed_sql(alias: str = "t") -> str:
    """SQL for "this trajectory solved its task": its stored success verdict,
    else (stored before schema v10, or imported) reward >= 1."""
    return f"COALESCE({alias}.success, {alias}.reward >= {DEFAULT_SUCCESS_THRESHOLD})"


class StoreReader:
    """Read-only access to a run file, safe to use from several threads.

    Construction brings the file's schema up to date and marks dead runs
    ``crashed`` (through ``open_db``) when the file is writable, then opens a
    read-only connection.

    Raises:
        FileNotFoundError: no file at ``path``.
        SchemaVersionError: the file is newer than this code, or older and
            read-only (so it cannot be upgraded).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            open_db(self.path, create=False).close()
        except sqlite3.OperationalError:
            pass  # a read-only copy (e.g. from a GPU box): read it as it is
        self._conn = connect(self.path, read_only=True)
        self._conn.isolation_level = None
        self._lock = threading.Lock()
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            self._conn.close()
            raise SchemaVersionError(
                f"{self.path} has schema v{version}, this Rollout Lab reads v{SCHEMA_VERSION}; "
                + ("upgrade rollout-lab" if version > SCHEMA_VERSION else
                   "it is read-only here: copy it somewhere writable so it can be upgraded"))

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()

    def __enter__(self) -> "StoreReader":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @contextmanager
    def _snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read transaction: every query inside sees the same snapshot.

        Raises:
            RunFileError: a query met a damaged page (the message names the
                damage and the recovery: commands that read part of the
                file do not check every page first, ``store.db.check_run_file``).
        """
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                yield self._conn
            except sqlite3.DatabaseError as err:
                if err.sqlite_errorcode != sqlite3.SQLITE_CORRUPT:
                    raise
                raise read_error(self.path, err) from None
            finally:
                if self._conn.in_transaction:  # a read: nothing to commit (COMMIT fails after a damaged page)
                    self._conn.execute("ROLLBACK")

    def _all(self, sql: str, params: list, json_columns: tuple[str, ...] = ()) -> list[dict]:
        with self._snapshot() as conn:
            return fetch_dicts(conn.execute(sql, params), json_columns)

    def _one(self, sql: str, params: list, json_columns: tuple[str, ...] = ()) -> dict | None:
        with self._snapshot() as conn:
            return fetch_dict(conn.execute(sql, params), json_columns)

    def runs(self) -> list[RunSummaryRow]:
        """All runs, oldest first: the run columns except config/manifest/summary,
        plus ``steps`` (training steps stored: step 0, the evaluation before
        training or an eval/select run's measurement, is not one, nor is a
        fork's evaluation at its fork step; an imported run's step 0 is one:
        another tool's first step, as the import counted it),
        ``final_pass_at_1`` (the last ``eval/pass_at_1`` written, or None),
        ``alerts`` (alert events) and ``last_alert`` (``"kind at step N"`` of
        the newest, or None)."""
        return cast(list[RunSummaryRow], [_as_seen(row) for row in self._all(
            "SELECT r.id, r.name, r.kind, r.scenario, r.status, r.pid, r.host, r.created_at, "
            "r.ended_at, r.heartbeat_at, r.last_step, r.reward_file, r.parent_id, r.fork_step, "
            "(SELECT COUNT(*) FROM steps s WHERE s.run_id = r.id AND (s.step > COALESCE(r.fork_step, 0) "
            " OR (s.step = 0 AND json_extract(r.manifest, '$.imported_from') IS NOT NULL))) AS steps, "
            "(SELECT s.eval_pass_at_1 FROM steps s WHERE s.run_id = r.id "
            " AND s.eval_pass_at_1 IS NOT NULL ORDER BY s.step DESC LIMIT 1) AS final_pass_at_1, "
            "(SELECT COUNT(*) FROM events e WHERE e.run_id = r.id AND e.kind = 'alert') AS alerts, "
            "(SELECT json_extract(e.payload, '$.alert') || ' at step ' || e.step FROM events e "
            " WHERE e.run_id = r.id AND e.kind = 'alert' ORDER BY e.id DESC LIMIT 1) AS last_alert "
            "FROM runs r ORDER BY r.id", [])])

    def run(self, run_id: int) -> RunRow | None:
        """The run row, ``config`` and ``manifest`` decoded."""
        return cast(RunRow | None, _as_seen(self._one("SELECT * FROM runs WHERE id = ?", [run_id], _RUN_JSON)))

    def run_by_name(self, name: str) -> RunRow | None:
        """The run row called ``name`` (names are unique)."""
        return cast(RunRow | None, _as_seen(self._one("SELECT * FROM runs WHERE name = ?", [name], _RUN_JSON)))

    def latest_run_id(self) -> int | None:
        """Id of the most recently created run."""
        row = self._one("SELECT MAX(id) AS id FROM runs", [])
        return None if row is None else row["id"]

    def latest_step(self, run_id: int) -> dict | None:
        """The last step's metrics: ``{"step", "created_at", **metrics}`` with
        every metric the engine wrote, keyed by its (TRL) name."""
        row = self._one(
            "SELECT step, created_at, metrics FROM steps WHERE run_id = ? "
            "ORDER BY step DESC LIMIT 1", [run_id], ("metrics",))
        if row is None:
            return None
        return {"step": row["step"], "created_at": row["created_at"], **row["metrics"]}

    def step_series(self, run_id: int, since_step: int = -1, limit: int | None = None) -> list[dict]:
        """Steps after ``since_step``, ascending, at most ``limit`` of them:
        ``{"step", <metric name>: value or None, ...}`` for every metric in
        ``STEP_METRIC_COLUMNS`` (e.g. ``reward``, ``completions/mean_length``).
        Meant for polling new steps; for a whole long history use
        ``metric_series`` (one dict per step costs ~10 ms per 10,000 steps)."""
        return self._all(
            f"SELECT step, {_SERIES_COLUMNS} FROM steps WHERE run_id = ? AND step > ? "
            "ORDER BY step LIMIT ?", [run_id, since_step, -1 if limit is None else limit])

    def step_metrics(self, run_id: int, since_step: int = -1) -> list[dict]:
        """Every metric the engine wrote for each step after ``since_step``
        (the ``metrics`` JSON, including keys without a column, such as
        ``elapsed_seconds`` or ``gigpo/anchor_shared_frac``), ascending:
        ``{"step", **metrics}``. For exports and benchmarks, not for polling."""
        rows = self._all("SELECT step, metrics FROM steps WHERE run_id = ? AND step > ? ORDER BY step",
                         [run_id, since_step], ("metrics",))
        return [{"step": row["step"], **(row["metrics"] or {})} for row in rows]

    def metric_series(self, run_id: int, metrics: tuple[str, ...] = ("reward",),
                      since_step: int = -1, max_points: int | None = None) -> dict[str, list]:
        """Column-wise series for plots: ``{"step": [...], name: [...]}`` for
        each name in ``metrics`` (keys of ``STEP_METRIC_COLUMNS``), steps after
        ``since_step`` ascending, None where a step lacks the metric. Cheaper
        than ``step_series`` on long runs (no dict per step).

        With ``max_points``, a longer series is averaged in SQL over buckets
        of ``ceil(n / max_points)`` consecutive steps (``step`` is each
        bucket's first step; the last bucket holds the newest step): a
        10,000-step history then costs one index scan, not 10,000 Python rows.

        Raises:
            KeyError: a name is not in ``STEP_METRIC_COLUMNS``.
            ValueError: ``max_points`` < 1.
        """
        unknown = [name for name in metrics if name not in STEP_METRIC_COLUMNS]
        if unknown:
            raise KeyError(f"no stored series for {unknown}; choose from "
                           f"{', '.join(STEP_METRIC_COLUMNS)}")
        if max_points is not None and max_points < 1:
            raise ValueError(f"max_points must be >= 1, got {max_points}")
        where = "FROM steps WHERE run_id = ?1 AND step > ?2"
        with self._snapshot() as conn:
            count, first = conn.execute(f"SELECT COUNT(*), MIN(step) {where}",
                                        [run_id, since_step]).fetchone()
            stride = -(-count // max_points) if max_points else 1
            if stride > 1:
                columns = ", ".join(["MIN(step)", *(f"AVG({STEP_METRIC_COLUMNS[name]})"
                                                    for name in metrics)])
                sql = f"SELECT {columns} {where} GROUP BY (step - ?3) / ?4 ORDER BY 1"
                rows = conn.execute(sql, [run_id, since_step, first, stride]).fetchall()
            else:
                columns = ", ".join(["step", *(STEP_METRIC_COLUMNS[name] for name in metrics)])
                rows = conn.execute(f"SELECT {columns} {where} ORDER BY step",
                                    [run_id, since_step]).fetchall()
        values = list(zip(*rows)) or [()] * (len(metrics) + 1)
        return {name: list(column) for name, column in zip(("step", *metrics), values)}

    def events(self, run_id: int, since_id: int = 0) -> list[EventRow]:
        """Events with id > ``since_id``, oldest first, ``payload`` decoded."""
        return cast(list[EventRow], self._all(
            "SELECT * FROM events WHERE run_id = ? AND id > ? ORDER BY id",
            [run_id, since_id], ("payload",)))

    def rollouts_since(self, run_id: int, after_rowid: int, limit: int = 50) -> list[dict]:
        """The newest ``limit`` trajectories with id > ``after_rowid``, in id
        order (oldest of them first), each with its group's prompt and
        example id. Use the last ``id`` as the next watermark."""
        rows = self._all(
            f'SELECT {ROLLOUT_COLUMNS} FROM trajectories t JOIN "groups" g ON g.id = t.group_id '
            "WHERE t.run_id = ? AND t.id > ? ORDER BY t.id DESC LIMIT ?",
            [run_id, after_rowid, limit])
        rows.reverse()
        return rows

    def steps(self, run_id: int) -> list[int]:
        """Step numbers with data, ascending: every step that has metrics,
        plus the step in progress (groups written, metrics not yet)."""
        # The steps table has one small row per step, so this reads 10,000
        # index entries for 10,000 steps, not 1,000,000 trajectories' groups.
        with self._snapshot() as conn:
            rows = conn.execute(
                "SELECT step FROM steps WHERE run_id = ?1 UNION ALL "
                'SELECT DISTINCT step FROM "groups" WHERE run_id = ?1 AND superseded = 0 '
                "AND step > (SELECT COALESCE(MAX(step), -1) FROM steps WHERE run_id = ?1) "
                "ORDER BY step", [run_id]).fetchall()
        return [row[0] for row in rows]

    def groups_of_step(self, run_id: int, step: int) -> list[StepGroupRow]:
        """The step's groups (superseded ones skipped), by index, each with
        ``trajectories``: ``[{"id", "idx", "reward", "advantage",
        "parse_status", "completion_tokens", "truncated", "judge_score", "success",
        "judge_rank"}]`` in index order."""
        with self._snapshot() as conn:
            groups = fetch_dicts(conn.execute(
                'SELECT * FROM "groups" WHERE run_id = ? AND step = ? AND superseded = 0 '
                "ORDER BY idx, id", [run_id, step]), ("example",))
            if not groups:
                return []
            by_id = {group["id"]: {**group, "trajectories": []} for group in groups}
            marks = ", ".join("?" for _ in by_id)
            for row in fetch_dicts(conn.execute(
                    "SELECT id, group_id, idx, reward, advantage, parse_status, "
                    "completion_tokens, truncated, judge_score, judge_rank, success, tool_calls FROM trajectories "
                    f"WHERE group_id IN ({marks}) ORDER BY group_id, idx", list(by_id))):
                by_id[row.pop("group_id")]["trajectories"].append(row)
        return cast(list[StepGroupRow], list(by_id.values()))

    def group(self, group_id: int) -> GroupRow | None:
        """The group row with ``trajectories``: its full trajectory rows
        (messages, components and details decoded), in index order; and
        ``judge_call``: its latest judge call's latency, tokens, response
        mode and attempts (None without one)."""
        with self._snapshot() as conn:
            group = fetch_dict(conn.execute('SELECT * FROM "groups" WHERE id = ?', [group_id]),
                               ("example",))
            if group is None:
                return None
            group["trajectories"] = fetch_dicts(conn.execute(
                "SELECT * FROM trajectories WHERE group_id = ? ORDER BY idx", [group_id]),
                _TRAJECTORY_JSON)
            calls = _calls_by_trajectory(conn, [t["id"] for t in group["trajectories"] if t.get("tool_calls")])
            for trajectory in group["trajectories"]:
                trajectory["calls"] = calls.get(trajectory["id"], [])
            group["judge_call"] = fetch_dict(conn.execute(
                "SELECT latency_s, prompt_tokens, completion_tokens, response_mode, attempts "
                "FROM judge_calls WHERE group_id = ? ORDER BY id DESC LIMIT 1", [group_id]))
        return cast(GroupRow, group)

    def env_rewards(self, group_id: int) -> dict[int, list[float | None]]:
        """Per trajectory id of the group, its turns' environment rewards in turn
        order (None where not stored: runs before schema v9); ``{}`` for a
        single-turn group."""
        with self._snapshot() as conn:
            rows = conn.execute(
                "SELECT u.trajectory_id, u.env_reward FROM turns u JOIN trajectories t "
                "ON t.id = u.trajectory_id WHERE t.group_id = ? ORDER BY u.trajectory_id, u.t", [group_id])
            out: dict[int, list[float | None]] = {}
            for trajectory_id, reward in rows:
                out.setdefault(trajectory_id, []).append(reward)
        return out

    def trajectory(self, trajectory_id: int) -> InspectedTrajectoryRow | None:
        """One full trajectory row plus its group's ``prompt``, ``example_id``,
        ``judge_status`` and ``turns`` (multi-step; ``[]`` otherwise)."""
        with self._snapshot() as conn:
            row = fetch_dict(conn.execute(
                "SELECT t.*, g.prompt, g.example_id, g.example, g.judge_status, g.initial_state_key "
                'FROM trajectories t JOIN "groups" g ON g.id = t.group_id WHERE t.id = ?',
                [trajectory_id]), _TRAJECTORY_JSON + ("example",))
            if row is None:
                return None
            row["turns"] = fetch_dicts(conn.execute(
                "SELECT * FROM turns WHERE trajectory_id = ? ORDER BY t", [trajectory_id]))
            row["calls"] = _calls_by_trajectory(conn, [trajectory_id] if row.get("tool_calls") else []).get(
                trajectory_id, [])
        return cast(InspectedTrajectoryRow, row)

    def uses_text_index(self, text: str) -> bool:
        """Whether :meth:`search` finds ``text`` through the file's text index
        (``rlab index``, :mod:`store.textindex`): the file has it and the
        text is long enough for it."""
        with self._snapshot() as conn:
            return uses_text_index(conn, text)

    def search(self, run_id: int, text: str, limit: int = 50, *, before: int | None = None,
               budget_s: float | None = None) -> Found:
        """The newest trajectories (at most ``limit``) older than trajectory
        ``before`` whose completion or prompt contains ``text``
        (case-insensitive for ASCII), read newest first within ``budget_s``
        seconds (None: until ``limit`` or the run's first trajectory); the
        result says how far back it read (:func:`store.search.search`). One
        read snapshot."""
        with self._snapshot() as conn:
            return search(conn, run_id, text, limit=limit, before=before, budget_s=budget_s)

    def reward_versions(self, run_id: int) -> list[dict]:
        """Rubric versions of the run, oldest first, ``weights`` decoded."""
        return self._all("SELECT * FROM reward_versions WHERE run_id = ? ORDER BY version",
                         [run_id], ("weights",))

    def judge_calls(self, run_id: int, limit: int = 50) -> list[dict]:
        """The newest ``limit`` judge calls, newest first."""
        return self._all("SELECT * FROM judge_calls WHERE run_id = ? ORDER BY id DESC LIMIT ?",
                         [run_id, limit])

    def checkpoints(self, run_id: int) -> list[dict]:
        """Checkpoints of the run by step: ``{"id", "step", "path", "created_at", "eval"}``,
        ``eval`` the held-out ``eval/pass_at_1`` stored for that step (None: no eval then)."""
        return self._all("SELECT c.*, s.eval_pass_at_1 AS eval FROM checkpoints c LEFT JOIN steps s "
                         "ON s.run_id = c.run_id AND s.step = c.step WHERE c.run_id = ? ORDER BY c.step, c.id",
                         [run_id])

    def commands(self, run_id: int) -> list[dict]:
        """Every command sent to the run, oldest first, ``payload`` decoded,
        with its ``status`` (pending/applied/rejected) and ``message``."""
        return self._all("SELECT * FROM commands WHERE run_id = ? ORDER BY id", [run_id],
                         ("payload",))

    def completions_of_step(self, run_id: int, step: int) -> dict[int, list[str]]:
        """The completions of a step's (non-superseded) groups: ``{group_id:
        [completion, ...]}`` in trajectory index order. Text only, no JSON to
        decode: what the TUI's diversity alert needs for every new step."""
        out: dict[int, list[str]] = {}
        with self._snapshot() as conn:
            for group_id, completion in conn.execute(
                    "SELECT group_id, completion FROM trajectories WHERE group_id IN "
                    '(SELECT id FROM "groups" WHERE run_id = ? AND step = ? AND superseded = 0) '
                    "ORDER BY group_id, idx", [run_id, step]):
                out.setdefault(group_id, []).append(completion)
        return out

    def outcomes(self, run_id: int, step: int | None = None) -> list[dict]:
        """Every trajectory of the run (superseded groups skipped), or of one
        ``step``, in write order: ``{"id", "step", "group_id", "idx",
        "example_id", "reward", "parse_status", "passed"}`` (``passed``: 1 when
        it solved its task, :func:`passed_sql`; 0 or None otherwise). What
        paired comparisons and pass@k need, without the text."""
        where = "" if step is None else " AND t.step = ?"
        return self._all(
            f"SELECT t.id, t.step, t.group_id, t.idx, g.example_id, t.reward, t.parse_status, {passed_sql()} "
            "AS passed "
            'FROM trajectories t JOIN "groups" g ON g.id = t.group_id '
            f"WHERE t.run_id = ? AND g.superseded = 0{where} ORDER BY t.id",
            [run_id] + ([] if step is None else [step]))

    def lowest_rewards(self, run_id: int, limit: int, *, step: int | None = None,
                       failed_only: bool = False) -> list[dict]:
        """The ``limit`` trajectories with the lowest reward, optionally of one
        ``step`` and only those that did not solve their task (:func:`passed_sql`;
        errored ones included); rows as in ``rollouts_since``. Errored rewards
        (NULL) count as lowest. Ties go round the groups (each group's lowest
        first, then each one's second, ...), so five tied zeros are five
        examples, not five samples of one prompt; within a round the newest
        step comes first, so a training run's tied failures are what its
        policy does now, not its first step's."""
        where = "".join([" AND t.step = ?" if step is not None else "",
                         f" AND COALESCE({passed_sql()}, 0) = 0" if failed_only else ""])
        params = [run_id] + ([step] if step is not None else []) + [limit]
        return self._all(
            f"SELECT {', '.join(c.split('.')[-1] for c in ROLLOUT_COLUMNS.split(', '))} FROM ("
            f"SELECT {ROLLOUT_COLUMNS}, ROW_NUMBER() OVER (PARTITION BY t.group_id, t.reward "
            "ORDER BY t.id) AS turn_in_group FROM trajectories t "
            'JOIN "groups" g ON g.id = t.group_id '
            f"WHERE t.run_id = ? AND g.superseded = 0{where}) "
            "ORDER BY reward IS NOT NULL, reward, turn_in_group, step DESC, id LIMIT ?", params)

    def anchor_share_by_step(self, run_id: int) -> list[dict]:
        """Per step of a multi-step run, the share of turns whose anchor group
        has more than one member (GiGPO, arXiv 2505.10978, section 5.5):
        ``[{"step", "share" (0..1), "turns"}]`` ascending; ``[]`` without turns."""
        # turns(run_id, step) index: reads only this run's turns, in step order.
        return self._all(
            "SELECT step, AVG(anchor_size > 1) AS share, COUNT(*) AS turns FROM turns "
            "WHERE run_id = ? GROUP BY step ORDER BY step", [run_id])


def _calls_by_trajectory(conn: sqlite3.Connection, trajectory_ids: list[int]) -> dict[int, list[ToolCallRow]]:
    """Each trajectory's tool calls in turn order (``arguments`` decoded); none for an empty list."""
    if not trajectory_ids:
        return {}
    marks = ", ".join("?" for _ in trajectory_ids)
    out: dict[int, list[ToolCallRow]] = {}
    for row in fetch_dicts(conn.execute(
            "SELECT trajectory_id, turn, idx, call_id, name, arguments, result, error, seconds FROM tool_calls "
            f"WHERE trajectory_id IN ({marks}) ORDER BY trajectory_id, turn, idx", trajectory_ids), ("arguments",)):
        out.setdefault(row.pop("trajectory_id"), []).append(cast(ToolCallRow, row))
    return out


def resolve_run(reader: StoreReader, run: int | str) -> RunRow:
    """The run row for ``run``: a run name, or else a run id.

    Raises:
        RunNotFoundError: no run by that name or id (a KeyError).
    """
    row = reader.run_by_name(str(run))
    if row is None and str(run).isdigit():
        row = reader.run(int(run))
    if row is None:
        raise RunNotFoundError(f"no run named or numbered {run!r} in {reader.path}; "
                       f"list them with `rlab runs --db {reader.path}`")
    return row
