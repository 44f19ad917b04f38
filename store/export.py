"""Run artifacts: results.jsonl, summary.json, manifest.json (``rlab export``)
and the run list (``rlab runs``)."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

from rlab.store.db import check_run_file, connect
from rlab.store.records import DEFAULT_SUCCESS_THRESHOLD
from rlab.store.reader import StoreReader, passed_sql, resolve_run
from rlab.store.rows import RunRow, RunSummaryRow
from rlab.store.secrets import scrub, scrub_text, secret_env_values

RESULT_FIELDS = (
    "trajectory_id", "step", "group_id", "example_id", "prompt", "completion", "reward",
    "components", "details", "parse_status", "advantage", "reward_version", "judge_score",
    "truncated", "completion_tokens", "success", "judge_status", "judge_error", "messages", "tool_calls",
)
_RESULTS_SQL = (
    "SELECT t.id, t.step, t.group_id, g.example_id, g.prompt, t.completion, t.reward, "
    "t.components, t.details, t.parse_status, t.advantage, t.reward_version, t.judge_score, "
    "t.truncated, t.completion_tokens, t.success, g.judge_status, g.judge_error, "
    "CASE WHEN g.initial_state_key IS NOT NULL THEN t.messages END, "
    "CASE WHEN t.tool_calls IS NOT NULL THEN (SELECT json_group_array(json_object("
    "'turn', c.turn, 'id', c.call_id, 'name', c.name, 'arguments', json(c.arguments), 'result', c.result, "
    "'error', c.error, 'seconds', c.seconds)) FROM (SELECT * FROM tool_calls WHERE trajectory_id = t.id "
    "ORDER BY turn, idx) c) END "
    'FROM trajectories t JOIN "groups" g ON g.id = t.group_id '
    "WHERE t.run_id = ? AND g.superseded = 0 ORDER BY t.id"
)
_PER_STEP_SQL = (
    f"SELECT t.step, COUNT(*), SUM({passed_sql()}), AVG(t.reward), AVG(t.reward * t.reward) "
    'FROM trajectories t JOIN "groups" g ON g.id = t.group_id '
    "WHERE t.run_id = ? AND g.superseded = 0 GROUP BY t.step ORDER BY t.step"
)
# A trajectory without a verdict (its scoring errored) did not solve its task either.
_FAILURE_SQL = (
    'SELECT t.parse_status, COUNT(*) FROM trajectories t JOIN "groups" g ON g.id = t.group_id '
    f"WHERE t.run_id = ? AND g.superseded = 0 AND NOT COALESCE({passed_sql()}, 0) GROUP BY 1"
)


def failure_mode(parse_status: object) -> str:
    """What a trajectory that did not solve its task failed by: its reward's ``parse_status``,
    ``wrong`` for an answer that parsed (``ok``) and was not right, ``unknown`` without one.
    The one rule of an export's ``failure_modes`` and an eval's ``failures``."""
    if parse_status == "ok":
        return "wrong"
    return str(parse_status) if parse_status else "unknown"


def _failure_modes(conn: sqlite3.Connection, run_id: int) -> dict[str, int]:
    """The run's failed trajectories (superseded ones left out) by :func:`failure_mode`, most first."""
    counts: dict[str, int] = {}
    for status, count in conn.execute(_FAILURE_SQL, [run_id]):
        mode = failure_mode(status)
        counts[mode] = counts.get(mode, 0) + count
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def list_runs(db_path: str | Path) -> list[RunSummaryRow]:
    """The runs in the file, oldest first, as ``StoreReader.runs()`` gives
    them (``id``, ``name``, ``scenario``, ``status``, ``steps``,
    ``final_pass_at_1``, times in Unix seconds...).

    Raises:
        FileNotFoundError: no file at ``db_path``.
        RunFileError: the file is damaged (where the runs table is intact,
            a list would pass a damaged file for a sound one), or no run file.
    """
    check_run_file(db_path, writable=False)
    with StoreReader(db_path) as reader:
        return reader.runs()


def export_run(db_path: str | Path, run: int | str, out_dir: str | Path) -> dict[str, Path]:
    """Write the run's artifacts into ``out_dir`` (created if needed).

    - ``results.jsonl``: one JSON object per trajectory (superseded ones
      left out), in write order, with the keys of ``RESULT_FIELDS`` and
      ``error`` (why scoring failed, with ``reward`` null; else null).
      ``messages`` is a multi-step episode's whole conversation in OpenAI's
      format (tool calls as ``tool_calls``, results as role ``tool``), null
      for a single turn; ``tool_calls`` a tool task's calls
      (``{"turn", "id", "name", "arguments", "result", "error", "seconds"}``),
      null where no tools were offered.
      ``judge_status`` and ``judge_error`` are its group's: ``"failed"``
      marks a reward without the judge's share (the verifier's alone),
      ``"ok"`` a judged one, null a group no judge ranked.
    - ``summary.json``: the run's kind; ``n``, ``pass_at_1`` and
      ``mean_reward`` over one set of examples: a training run's last
      held-out eval (``n`` its examples, ``eval_step`` its step; None
      without one), an eval or select run's stored summary (with
      ``pass_at_k`` for select); a training run's ``training``: its
      ``trajectories`` (training samples), their ``pass_rate`` and
      ``mean_reward``; ``success``: what counts as solved (the
      run's declared success function and threshold); per step, the number
      of trajectories, pass rate (fraction solved: ``store.reader.passed_sql``),
      reward mean, ``reward_std`` as TRL and the dashboard define it (the
      mean within-group std the run logged; None if it logged none) and
      ``reward_std_all`` (the population std over all the step's rewards); the ``eval/pass_at_1`` series;
      ``failure_modes``: the exported trajectories that did not solve their task, counted by
      :func:`failure_mode` (a wrong answer as ``wrong``, not by its parse status ``ok``).
    - ``manifest.json``: the manifest the engine stored at ``start_run``.

    Every string is scrubbed of credentials. Returns ``{"results",
    "summary", "manifest"}`` -> path written.

    Raises:
        FileNotFoundError: no file at ``db_path``.
        KeyError: no such run.
        RunFileError: the file is damaged (found before anything is written), or no run file.
    """
    check_run_file(db_path, writable=False)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with StoreReader(db_path) as reader:
        row = resolve_run(reader, run)
        series = reader.step_series(row["id"])
        metrics = reader.step_metrics(row["id"])
    secrets = secret_env_values()
    conn = connect(db_path, read_only=True)
    try:
        conn.execute("BEGIN")  # one snapshot for the three files
        paths = {
            "results": _write_results(conn, row["id"], out_dir / "results.jsonl", secrets),
            "summary": _write_json(out_dir / "summary.json",
                                   _summary(conn, row, series, metrics), secrets),
            "manifest": _write_json(out_dir / "manifest.json", row["manifest"], secrets),
        }
        conn.execute("COMMIT")
    finally:
        conn.close()
    return paths


def _write_results(conn: sqlite3.Connection, run_id: int, path: Path,
                   secrets: list[str]) -> Path:
    cursor = conn.execute(_RESULTS_SQL, [run_id])
    with path.open("w", encoding="utf-8") as out:
        while rows := cursor.fetchmany(1000):
            for values in rows:
                record = dict(zip(RESULT_FIELDS, values))
                for key in ("components", "details", "messages", "tool_calls"):
                    record[key] = None if record[key] is None else json.loads(record[key])
                record["truncated"] = bool(record["truncated"])
                record["error"] = record["details"].get("error")  # beside a reward of null: no verdict
                out.write(scrub_text(json.dumps(record, ensure_ascii=False), secrets) + "\n")
    return path


def _summary(conn: sqlite3.Connection, run: RunRow, series: list[dict], metrics: list[dict]) -> dict:
    """``summary.json`` (:func:`export_run`): ``series`` and ``metrics`` are the run's
    ``StoreReader.step_series`` and ``step_metrics``."""
    steps = []
    trl_std = {s["step"]: s.get("reward_std") for s in series}
    for step, count, passed, mean, mean_sq in conn.execute(_PER_STEP_SQL, [run["id"]]):
        steps.append({"step": step, "trajectories": count, "pass_rate": (passed or 0) / count,
                      "reward_mean": mean, "reward_std": trl_std.get(step),
                      "reward_std_all": None if mean is None else math.sqrt(max(mean_sq - mean**2, 0))})
    trajectories = sum(s["trajectories"] for s in steps)
    evals = [{"step": s["step"], "value": s["eval/pass_at_1"]}
             for s in series if s["eval/pass_at_1"] is not None]
    return {
        "run": {key: run[key] for key in ("id", "name", "kind", "scenario", "status", "created_at",
                                          "ended_at", "last_step")},
        # n / pass_at_1 / mean_reward over one set of examples for every kind: a training run's
        # last held-out eval (its training samples are another population: "training");
        # an eval or select run's own summary (written by the loop) replaces them below.
        **_last_eval(evals, metrics),
        **({"training": _training(steps)} if run["kind"] == "train" else {}),
        "success": success_rule(run),
        "trajectories": trajectories,
        "steps": steps,
        "eval_pass_at_1": evals,
        "failure_modes": _failure_modes(conn, run["id"]),
        **(run.get("summary") or {}),
    }


def _training(steps: list[dict]) -> dict:
    """A training run's own samples (``steps``: :func:`_summary`'s per-step figures): how many
    ``trajectories``, their ``pass_rate`` and ``mean_reward`` (None without any)."""
    trajectories = sum(s["trajectories"] for s in steps)
    rewarded = [s for s in steps if s["reward_mean"] is not None]
    return {"trajectories": trajectories,
            "pass_rate": sum(s["pass_rate"] * s["trajectories"] for s in steps) / trajectories if steps else None,
            "mean_reward": (sum(s["reward_mean"] * s["trajectories"] for s in rewarded)
                            / sum(s["trajectories"] for s in rewarded)) if rewarded else None}


def _last_eval(evals: list[dict], metrics: list[dict]) -> dict:
    """``n`` (examples), ``pass_at_1``, ``mean_reward`` and ``eval_step`` of the run's last
    held-out eval, from its step's metrics; each None without one (or without the figure:
    runs stored before ``eval/num_examples`` was logged)."""
    if not evals:
        return {"n": None, "pass_at_1": None, "mean_reward": None, "eval_step": None}
    last = evals[-1]
    logged = next((m for m in metrics if m["step"] == last["step"]), {})
    n = logged.get("eval/num_examples")
    return {"n": None if n is None else int(n), "pass_at_1": last["value"],
            "mean_reward": logged.get("eval/reward"), "eval_step": last["step"]}


def success_rule(run: RunRow) -> dict:
    """What the run counted as solved: ``{"function", "threshold"}`` from its
    stored config (``function`` None: the total reward; runs stored before
    success was declared, and imported runs, were judged by reward >= 1)."""
    config = run.get("config") or {}
    return {"function": config.get("success"),
            "threshold": config.get("success_threshold", DEFAULT_SUCCESS_THRESHOLD)}


def _write_json(path: Path, value: dict, secrets: list[str]) -> Path:
    path.write_text(json.dumps(scrub(value, secrets), indent=2, ensure_ascii=False) + "\n",
                    encoding="utf-8")
    return path
