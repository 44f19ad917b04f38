"""Every StoreReader query is answered through an index (issue 3: "indices
for every query the TUI makes"), checked with EXPLAIN QUERY PLAN."""

import inspect

import pytest

from rlab.store.reader import StoreReader
from rlab.store.textindex import TEXT_INDEX, build_text_index
from rlab.store.writer import StoreWriter
from test_store_helpers import make_group

SMALL_TABLES = {"runs", "sqlite_master"}  # one row per run, per table: scanning them is fine


def reader_calls(reader: StoreReader, run_id: int) -> dict:
    """One call per public reader method (name -> zero-argument callable)."""
    return {
        "runs": reader.runs, "run": lambda: reader.run(run_id),
        "run_by_name": lambda: reader.run_by_name("plans"),
        "latest_run_id": reader.latest_run_id, "latest_step": lambda: reader.latest_step(run_id),
        "step_series": lambda: reader.step_series(run_id, since_step=0),
        "step_metrics": lambda: reader.step_metrics(run_id, since_step=0),
        "metric_series": lambda: (reader.metric_series(run_id, ("reward", "kl")),
                                  reader.metric_series(run_id, max_points=2)),
        "events": lambda: reader.events(run_id, since_id=1),
        "rollouts_since": lambda: reader.rollouts_since(run_id, 3),
        "steps": lambda: reader.steps(run_id),
        "groups_of_step": lambda: reader.groups_of_step(run_id, 1),
        "group": lambda: reader.group(1), "env_rewards": lambda: reader.env_rewards(1),
        "trajectory": lambda: reader.trajectory(2),
        "search": lambda: reader.search(run_id, "try"),
        "uses_text_index": lambda: reader.uses_text_index("try"),
        "reward_versions": lambda: reader.reward_versions(run_id),
        "judge_calls": lambda: reader.judge_calls(run_id),
        "checkpoints": lambda: reader.checkpoints(run_id),
        "commands": lambda: reader.commands(run_id),
        "anchor_share_by_step": lambda: reader.anchor_share_by_step(run_id),
        "completions_of_step": lambda: reader.completions_of_step(run_id, 1),
        "outcomes": lambda: (reader.outcomes(run_id), reader.outcomes(run_id, step=1)),
        "lowest_rewards": lambda: (reader.lowest_rewards(run_id, 5),
                                   reader.lowest_rewards(run_id, 5, step=1, failed_only=True)),
    }


@pytest.fixture(params=[False, True], ids=["scan", "text_index"])
def reader(tmp_path, request):
    path = tmp_path / "runs.db"
    with StoreWriter(path) as writer:
        run_id = writer.start_run("plans", "arithmetic", {}, {})
        for step in range(3):
            writer.write_groups(run_id, step, [make_group(i, size=4, turns=2) for i in range(2)])
            writer.write_step(run_id, step, {"reward": 0.5})
        writer.write_event(run_id, "alert", {"message": "x"})
        if request.param:
            build_text_index(writer.database)
    with StoreReader(path) as reader:
        yield reader, run_id


def test_every_reader_method_is_covered(reader):
    reader, run_id = reader
    public = {name for name, _ in inspect.getmembers(StoreReader, inspect.isfunction)
              if not name.startswith("_")} - {"close"}
    missing = public - set(reader_calls(reader, run_id))
    assert not missing, f"add a call of {sorted(missing)} to reader_calls() in this test"


def test_no_reader_query_scans_a_growing_table(reader):
    reader, run_id = reader
    for name, call in reader_calls(reader, run_id).items():
        statements = []
        reader._conn.set_trace_callback(statements.append)  # bound values are expanded
        try:
            call()
        finally:
            reader._conn.set_trace_callback(None)
        for sql in statements:
            fts5_own = sql.startswith(("--", "PRAGMA")) or f"{TEXT_INDEX}_" in sql  # the text index's reads
            if sql in ("BEGIN", "ROLLBACK") or fts5_own:
                continue
            plan = [row[3] for row in reader._conn.execute("EXPLAIN QUERY PLAN " + sql)]
            # "SCAN (subquery-N)" reads rows a subquery already selected through an index;
            # "SCAN f VIRTUAL TABLE INDEX" is the text index's own lookup (its MATCH)
            scans = [step for step in plan if step.startswith("SCAN ")
                     and step.split()[1] not in SMALL_TABLES | {"r"} and not step.startswith("SCAN (subquery-")
                     and "VIRTUAL TABLE INDEX" not in step]
            assert not scans, f"{name}: {sql}\n{plan}"
