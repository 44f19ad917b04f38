"""Nothing a user sends as a reward edit can fail the run (issue 17).

The engine's gate (engine.rewards.edit.gate.accept_edit) runs the editor's checks
on every set_rewards payload; the control channel stores that payload as it
is (a function named like a credential keeps its weight) and scrubs it once
it is resolved.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time

import pytest

from rlab.engine.rewards.edit.gate import EditRejected, accept_edit
from rlab.engine.rewards.scoring_process import ProcessRubric, ScoringProcess
from rlab.store.control import send_command
from rlab.store.reader import StoreReader
from rlab.store.writer import StoreWriter

EXAMPLE = {"id": "add-2-3", "prompt": "2+3=", "answer": "5"}
SAMPLES = [(EXAMPLE, "5"), (EXAMPLE, "6")]

# A reward function named like a credential: the scrubber's key-name rule matches "*_key".
ANSWER_KEY = '''
def answer_key(example, completion):
    return 1.0 if completion.strip() == example["answer"] else 0.0

WEIGHTS = {"answer_key": 1.0}
'''

BAD_EDITS = {
    "raises": ("def f(example, completion):\n    raise ValueError('boom')\n\nWEIGHTS = {'f': 1.0}\n",
               "ValueError: boom"),
    "nan": ("def f(example, completion):\n    return float('nan')\n\nWEIGHTS = {'f': 1.0}\n", "not finite"),
    "string": ("def f(example, completion):\n    return '1.0'\n\nWEIGHTS = {'f': 1.0}\n", "a str, not a number"),
    "syntax": ("def f(:\n", "SyntaxError"),
    "hangs": ("def f(example, completion):\n    while True:\n        pass\n\nWEIGHTS = {'f': 1.0}\n",
              "TimeoutError"),
}


def test_the_gate_refuses_an_edit_that_drops_the_success_function_with_advice_for_an_edit():
    """The refusal reaches the TUI's editor and `rlab reward`, which take no --success."""
    from rlab.engine.rewards.success import SuccessRule

    with pytest.raises(EditRejected, match="keep correct in WEIGHTS") as refused:
        accept_edit({"source": ANSWER_KEY, "weights": None}, SAMPLES, success=SuccessRule("correct"))
    assert "--success" not in str(refused.value)


@pytest.mark.parametrize("name", sorted(BAD_EDITS))
def test_the_gate_rejects_each_bad_edit_with_its_reason(name):
    source, reason = BAD_EDITS[name]
    with pytest.raises(EditRejected, match=reason):
        accept_edit({"source": source, "weights": None}, SAMPLES, timeout_s=1.0)


@pytest.mark.parametrize("payload, reason", [
    ({"source": ANSWER_KEY, "weights": {"answer_key": float("nan")}}, "finite number"),
    ({"source": ANSWER_KEY, "weights": {"other": 1.0}}, "other"),
    ({"source": 3, "weights": {}}, "needs"),
])
def test_the_gate_rejects_bad_weights_and_malformed_payloads(payload, reason):
    with pytest.raises(EditRejected, match=reason):
        accept_edit(payload, SAMPLES, timeout_s=2.0)


def test_the_gate_accepts_a_function_named_like_a_credential_without_running_it_here():
    version = accept_edit({"source": ANSWER_KEY + "\nimport os\nos.environ['RAN_HERE'] = '1'\n",
                           "weights": {"answer_key": 2.0}}, SAMPLES, timeout_s=2.0)
    assert version.weights == {"answer_key": 2.0} and "RAN_HERE" not in os.environ
    process = ScoringProcess()
    try:
        scored = ProcessRubric(version, process).score_group([EXAMPLE] * 2, ["5", "6"])
    finally:
        process.close()
    assert [r.reward for r in scored] == [2.0, 0.0]


def test_set_rewards_payload_is_stored_as_sent_and_scrubbed_once_resolved(tmp_path):
    db = tmp_path / "c.db"
    writer = StoreWriter(db)
    run_id = writer.start_run("r", "arithmetic", {}, {})
    payload = {"source": ANSWER_KEY, "weights": {"answer_key": 1.0}}
    cid = send_command(db, run_id, "set_rewards", payload)
    pause = send_command(db, run_id, "pause", {"api_key": "sk-abc"})
    pending = {c["id"]: c for c in writer.poll_commands(run_id)}
    assert pending[cid]["payload"] == payload  # what the engine will run, weight intact
    assert pending[pause]["payload"] == {"api_key": "REDACTED"}  # other payloads are scrubbed at once
    writer.resolve_command(cid, "applied")
    writer.close()
    stored = json.loads(sqlite3.connect(db).execute("SELECT payload FROM commands WHERE id = ?",
                                                    [cid]).fetchone()[0])
    assert stored["weights"] == {"answer_key": "REDACTED"} and stored["source"] == ANSWER_KEY


def _wait(predicate, timeout=180.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


@pytest.mark.e2e
def test_the_engine_applies_a_credential_named_function_and_rejects_bad_edits(tmp_path, raw_tiny_model_dir):
    """One engine process: the scrubber case applies; raise/NaN/string edits are rejected
    on the last step's groups and the run stays on its version and keeps running."""
    db = tmp_path / "gate.db"
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "rlab.engine.cli", "run", "--headless", "--model", str(raw_tiny_model_dir),
         "--db", str(db), "--name", "gate", "--prompts-per-step=2", "--group-size=2", "--eval-size=4",
         "--eval-every=1000", "--checkpoint-every=1000"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: db.exists() and StoreReader(db).run_by_name("gate") is not None)
        reader = StoreReader(db)
        run_id = reader.run_by_name("gate")["id"]
        _wait(lambda: (reader.latest_step(run_id) or {}).get("step", 0) >= 1)
        status = lambda cid: {c["id"]: c for c in reader.commands(run_id)}[cid]  # noqa: E731
        sent = {}
        for name in ("raises", "nan", "string"):
            sent[name] = send_command(db, run_id, "set_rewards", {"source": BAD_EDITS[name][0], "weights": {"f": 1.0}})
            _wait(lambda: status(sent[name])["status"] != "pending")
        # arithmetic's success function is `correct`: an edit without it would leave pass@1 unmeasured
        dropped = send_command(db, run_id, "set_rewards", {"source": ANSWER_KEY, "weights": {"answer_key": 1.0}})
        _wait(lambda: status(dropped)["status"] != "pending")
        keeps = ANSWER_KEY.replace("WEIGHTS = {\"answer_key\": 1.0}",
                                   "def correct(example, completion):\n    return answer_key(example, completion)\n\n"
                                   "WEIGHTS = {\"answer_key\": 1.0, \"correct\": 0.0}")
        good = send_command(db, run_id, "set_rewards", {"source": keeps, "weights": {"answer_key": 1.0, "correct": 0.0}})
        _wait(lambda: status(good)["status"] != "pending")
        applied_at = reader.latest_step(run_id)["step"]
        _wait(lambda: reader.latest_step(run_id)["step"] >= applied_at + 2)
        send_command(db, run_id, "stop")
        proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0
    for name in ("raises", "nan", "string"):
        command = status(sent[name])
        assert command["status"] == "rejected" and BAD_EDITS[name][1] in command["message"], command
    assert status(dropped)["status"] == "rejected" and "success = 'correct'" in status(dropped)["message"]
    assert status(good)["status"] == "applied", status(good)
    assert reader.run(run_id)["status"] == "stopped"
    versions = reader.reward_versions(run_id)
    assert [v["version"] for v in versions] == [1, 2]
    assert versions[1]["weights"] == {"answer_key": 1.0, "correct": 0.0}


# Passes the gate (a fresh process, few calls), then raises in the scoring process.
RAISES_LATER = '''
CALLS = [0]

def correct(example, completion):
    CALLS[0] += 1
    if CALLS[0] > 12:
        raise RuntimeError("rare input")
    return 1.0 if completion.strip() == example["answer"] else 0.0

WEIGHTS = {"correct": 1.0}
'''


@pytest.mark.e2e
def test_a_version_that_raises_during_training_pauses_the_run_and_the_previous_one_comes_back(
        tmp_path, raw_tiny_model_dir):
    db = tmp_path / "pause.db"
    proc = subprocess.Popen(
        [sys.executable, "-P", "-m", "rlab.engine.cli", "run", "--headless", "--model", str(raw_tiny_model_dir),
         "--db", str(db), "--name", "pause", "--prompts-per-step=2", "--group-size=2", "--eval-size=4",
         "--eval-every=1000", "--checkpoint-every=1000"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: db.exists() and StoreReader(db).run_by_name("pause") is not None)
        reader = StoreReader(db)
        run_id = reader.run_by_name("pause")["id"]
        _wait(lambda: (reader.latest_step(run_id) or {}).get("step", 0) >= 1)
        original = reader.reward_versions(run_id)[0]
        send_command(db, run_id, "set_rewards", {"source": RAISES_LATER, "weights": {"correct": 1.0}})
        _wait(lambda: reader.run(run_id)["status"] == "paused")
        paused = [e for e in reader.events(run_id) if e["kind"] == "pause"][-1]
        back = send_command(db, run_id, "set_rewards", {"source": original["source"], "weights": original["weights"]})
        send_command(db, run_id, "resume")
        _wait(lambda: {c["id"]: c for c in reader.commands(run_id)}[back]["status"] == "applied")
        resumed_at = reader.latest_step(run_id)["step"]
        _wait(lambda: reader.latest_step(run_id)["step"] >= resumed_at + 2)
        send_command(db, run_id, "stop")
        proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 0
    payload = paused["payload"]
    assert payload["reason"] == "reward function error" and "rare input" in payload["first"]
    assert payload["version"] == 2 and "press u" in payload["undo"]
    errored = reader.group(reader.groups_of_step(run_id, paused["step"])[-1]["id"])["trajectories"]
    assert any("rare input" in (t["details"].get("error") or "") for t in errored)
    assert all(t["advantage"] == 0.0 for t in errored)  # an error's 0 is not trained on
    assert [v["version"] for v in reader.reward_versions(run_id)] == [1, 2, 3]
    assert reader.reward_versions(run_id)[2]["source"] == original["source"]
    assert reader.run(run_id)["status"] == "stopped"
