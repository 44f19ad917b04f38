"""A policy's text never fails a run (issue 59, item 1): legal call texts that Python's json
module cannot take (nesting past the stack, an integer past 4,300 digits, a lone surrogate
escape) are that turn's counted error, in a real run of the calculator through `rlab run`."""

from __future__ import annotations

import json
import sqlite3

from rlab.engine.cli.main import main
from rlab.engine.policy.model import Policy
from rlab.engine.types import Sample

ESCAPES = [
    '<tool_call>{"name":"multiply","arguments":{"a":' + "[" * 1000 + "]" * 1000 + ',"b":3}}</tool_call>',
    '<tool_call>{"name":"multiply","arguments":{"a":' + "7" * 4301 + ',"b":3}}</tool_call>',
    '<tool_call>{"name":"multiply","arguments":{"a":"\\ud800","b":3}}</tool_call>',
]
PROBLEMS = ["too deeply", "4300 digits", "lone surrogate"]


def test_three_escaping_call_texts_are_three_counted_errors_and_the_run_finishes(tmp_path, monkeypatch, capsys):
    sample = Policy.sample
    scripted = list(ESCAPES)

    def first_turns_scripted(self, prompt_ids, **kwargs):
        """The real policy's samples, the first three of the first training turn (its 2 x 2
        rollouts; the held-out eval's turns are 2 or fewer) replaced by the escaping texts, as the
        policy's own tokens, so the trainer trains on them as it would on any turn."""
        out = sample(self, prompt_ids, **kwargs)
        for i in range(min(len(out), len(scripted)) if len(prompt_ids) == 4 else 0):
            text = scripted.pop(0)
            ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.eos_id]
            out[i] = Sample(ids, text, [-1.0] * len(ids), False)
        return out

    monkeypatch.setattr(Policy, "sample", first_turns_scripted)
    db = tmp_path / "runs.db"
    code = main(["run", "--headless", "--scenario", "calculator", "--db", str(db), "--name", "escapes",
                 "--max-steps", "2", "--prompts-per-step", "2", "--group-size", "2", "--eval-every", "100",
                 "--eval-size", "2"])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and summary["status"] == "finished"
    assert not scripted
    with sqlite3.connect(db) as conn:
        errors = [e for (e,) in conn.execute("select error from tool_calls where error is not null")]
    for problem in PROBLEMS:
        assert sum(problem in e for e in errors) == 1, (problem, errors)
    with sqlite3.connect(db) as conn:
        step_1 = json.loads(conn.execute("select metrics from steps where step = 1").fetchone()[0])
    assert step_1["tools/error_share"] > 0  # counted in the step's figures
