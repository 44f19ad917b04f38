"""Tool calls in the run file (issue 45): stored with their trajectory, counted in the step's
metrics, watched by the alerts, exported as OpenAI messages and imported back."""

from __future__ import annotations

import json

import pytest
from pydantic import TypeAdapter

from fixtures.agentdb import agent_group, build_agent_db
from rlab.engine.alerts import GroupStats
from rlab.engine.alerts import AlertThresholds
from rlab.engine.alerts import AlertWatch
from rlab.store.formats import import_path
from rlab.store.formats.base import tool_calls_of
from rlab.store.formats.export import export_as
from rlab.store.export import export_run
from rlab.store.reader import StoreReader
from rlab.store.records import GroupRecord, ToolCallRecord
from rlab.store.stepstats import step_stats


def group() -> GroupRecord:
    return agent_group()


def test_the_step_metrics_of_a_tool_step():
    metrics = step_stats([group()])
    assert metrics["tools/calls_mean"] == pytest.approx(6 / 4)
    assert metrics["tools/error_share"] == pytest.approx(1 / 6)
    assert metrics["tools/use_rate"] == pytest.approx(3 / 4)
    assert metrics["tools/loop_share"] == pytest.approx(1 / 4)
    assert metrics["turns/mean"] == pytest.approx((2 + 1 + 3 + 3) / 4)
    assert metrics["tools/multiply/calls"] == pytest.approx(5 / 4) and metrics["tools/add/calls"] == pytest.approx(1 / 4)


def test_a_step_without_tools_has_no_tool_metrics():
    plain = group()
    for t in plain.trajectories:
        t.tool_calls = None
    assert not any(k.startswith(("tools/", "turns/")) for k in step_stats([plain]))


def test_hallucinated_tool_names_do_not_flood_the_metrics():
    g = group()
    g.trajectories[1].tool_calls = [ToolCallRecord(0, k, f"c{k}", name, {}, "", "no tool named") for k, name in
                                    enumerate(["a b", "x" * 80, *[f"t{i}" for i in range(30)]])]
    names = [k for k in step_stats([g]) if k.endswith("/calls")]
    assert len(names) == 16 and "tools/a b/calls" not in names


def test_calls_are_stored_and_read_back_with_their_trajectory(tmp_path):
    db = tmp_path / "runs.db"
    run_id = build_agent_db(db)
    with StoreReader(db) as reader:
        [light] = reader.groups_of_step(run_id, 1)
        assert [t["tool_calls"] for t in light["trajectories"]] == [1, 0, 2, 3]
        stored = reader.group(light["id"])
        calls = stored["trajectories"][2]["calls"]
        assert [(c["turn"], c["name"], c["arguments"], c["error"] is None) for c in calls] == [
            (0, "multiply", {"a": "two"}, False), (1, "add", {"a": 2, "b": 3}, True)]
        inspected = reader.trajectory(stored["trajectories"][0]["id"])
        assert inspected["calls"][0]["result"] == "6" and inspected["calls"][0]["seconds"] == pytest.approx(0.002)


def test_the_alerts_name_a_loop_a_rise_of_errors_and_tools_abandoned():
    watch = AlertWatch(AlertThresholds(window=4))
    fired = []
    plan = ([{"tools/loop_share": 0.0, "tools/error_share": 0.05, "tools/use_rate": 0.9, "success_rate": 0.8}] * 4
            + [{"tools/loop_share": 0.6, "tools/error_share": 0.4, "tools/use_rate": 0.3, "success_rate": 0.5}] * 2)
    for step, metrics in enumerate(plan, start=1):
        stats = [GroupStats.of_record(step, 7, group())]
        fired += [(a.kind, a.step, a.group_ids) for a in watch.observe(step, metrics, stats)]
    assert ("tool_loop", 5, (7,)) in fired
    assert ("tool_errors", 5, (7,)) in fired
    assert ("tool_abandon", 5, ()) in fired  # the window's late half (steps 4, 5) fell 0.3 in use, 0.15 in success


def _paid_steps(reward_of, steps=3, seed=0):
    """Steps of 4 groups x 8 tool trajectories: calls 0-3, success drawn, reward ``reward_of(calls, ok, rng)``."""
    import random

    rng = random.Random(seed)
    for step in range(1, steps + 1):
        groups = []
        for gid in range(4):
            calls = [rng.randint(0, 3) for _ in range(8)]
            ok = [c > 0 and rng.random() < 0.6 for c in calls]  # a call is what solves it, as in the calculator
            groups.append(GroupStats(step, 10 * step + gid, [reward_of(c, s, rng) for c, s in zip(calls, ok)],
                                     [f"t{c}" for c in calls], successes=ok, tool_calls=calls,
                                     tool_errors=[0] * 8, looped=[False] * 8))
        yield step, groups


def _fired(reward_of, scale=1.0, **thresholds):
    watch = AlertWatch(AlertThresholds(**thresholds), reward_scale=scale)
    return [a for step, groups in _paid_steps(reward_of) for a in watch.observe(step, {}, groups)
            if a.kind == "tool_paid"]


def test_tool_paid_names_a_rubric_that_pays_for_every_call():
    fired = _fired(lambda calls, ok, rng: float(ok) + 1.0 * calls, scale=2.0)
    assert [a.step for a in fired] == [1]  # once, at the first step: the hole shows before any loop
    assert fired[0].value == pytest.approx(0.5)  # one call: half the rubric's total of 2
    assert "each tool call adds +1.00 reward" in fired[0].message
    assert fired[0].group_ids and all(10 <= g < 14 for g in fired[0].group_ids)


def test_tool_paid_stays_quiet_on_an_honest_rubric_where_calls_only_help():
    # The calculator's rewards.py: the exact answer, minus 0.1 a failed call. Calls correlate with
    # reward here (they are how it is solved), but not at the same success verdict.
    assert _fired(lambda calls, ok, rng: float(ok) - 0.1 * (calls > 2)) == []
    assert _fired(lambda calls, ok, rng: float(ok) + rng.gauss(0, 0.3)) == []  # noise is no slope


def test_tool_paid_waits_for_the_calls_to_vary_and_its_threshold_is_a_setting():
    paid = lambda calls, ok, rng: float(ok) + 0.05 * calls  # noqa: E731
    assert _fired(paid) == []  # 0.05 a call is under the default 0.1 of the rubric's total
    assert [a.step for a in _fired(paid, tool_paid=0.04)] == [1]
    assert _fired(lambda calls, ok, rng: float(ok) + calls, tool_paid_spread=1e6) == []


# -- export and import --------------------------------------------------------------------------

def _stored_run(tmp_path):
    db = tmp_path / "runs.db"
    build_agent_db(db)
    return db


def test_results_jsonl_holds_openai_messages_that_openai_types_accept(tmp_path):
    from openai.types.chat import ChatCompletionMessageParam

    export_run(_stored_run(tmp_path), "agent", tmp_path / "out")
    records = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    adapter = TypeAdapter(list[ChatCompletionMessageParam])
    for record in records:
        adapter.validate_python(record["messages"])  # raises on a message OpenAI would refuse
    assert records[2]["tool_calls"][1] == {"turn": 1, "id": "call_1_0", "name": "add", "arguments": {"a": 2, "b": 3},
                                           "result": "5", "error": None, "seconds": 0.001}
    tool = next(m for m in records[0]["messages"] if m["role"] == "tool")
    assert tool == {"role": "tool", "tool_call_id": "call_0_0", "name": "multiply", "content": "6"}


@pytest.mark.parametrize("format", ["verifiers", "art"])
def test_exported_tool_trajectories_import_back_with_their_calls(tmp_path, format):
    db = _stored_run(tmp_path)
    export_as(db, "agent", tmp_path / "out", format)
    summary = import_path(tmp_path / "out", tmp_path / "back.db", format=format)
    with StoreReader(tmp_path / "back.db") as reader:
        light = reader.groups_of_step(summary.run_id, 0 if format == "verifiers" else 1)[0]
        back = reader.group(light["id"])["trajectories"]
    original = group().trajectories
    assert [t["messages"] for t in back] == [t.messages for t in original]
    assert [[(c["name"], c["arguments"], c["result"], c["error"]) for c in t["calls"]] for t in back] == [
        [(c.name, c.arguments, c.result, c.error) for c in t.tool_calls or []] for t in original]


def test_the_tool_calls_of_messages_another_tool_wrote():
    messages = [{"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "x1", "type": "function", "function": {"name": "search", "arguments": "{\"q\": \"rl\"}"}},
                    {"id": "x2", "type": "function", "function": {"name": "open", "arguments": "not json"}}]},
                {"role": "tool", "tool_call_id": "x1", "content": "3 hits"},
                {"role": "assistant", "content": "done"}]
    calls = tool_calls_of(messages)
    assert [(c.turn, c.index, c.name, c.arguments, c.result) for c in calls] == [
        (0, 0, "search", {"q": "rl"}, "3 hits"), (0, 1, "open", {"raw": "not json"}, "")]
    assert tool_calls_of([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]) is None


def test_tool_abandon_names_a_policy_that_stops_calling_before_it_ever_succeeded():
    """Issue 59, item 3: a newcomer's one-tool task whose use fell 0.39 -> 0 by step 7 while
    success stayed 0 raised no alert (tool_abandon waited for success to fall)."""
    uses = [0.39, 0.3, 0.2, 0.1, 0.05, 0.02, 0.0, 0.0, 0.0, 0.0]

    def fired(successes):
        watch = AlertWatch(AlertThresholds())
        return [(a.kind, a.step, a.message) for step, (use, ok) in enumerate(zip(uses, successes), start=1)
                for a in watch.observe(step, {"tools/use_rate": use, "success_rate": ok}, [])
                if a.kind == "tool_abandon"]

    [(_, step, message)] = fired([0.0] * 10)
    assert step == 10 and "no trajectory succeeded" in message and "transcripts" in message
    assert fired([0.2] * 10) == []  # a policy that succeeds as before is not abandoning its tools
