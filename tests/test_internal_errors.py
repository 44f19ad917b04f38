"""Issue 46, 2: an error of ours raised after a run started keeps its traceback
(the run's engine log and its error event, scrubbed of secrets), and the
terminal gets one line that names the step and where the traceback is."""

from __future__ import annotations

from pathlib import Path

from rlab.engine.cli.errors import handled
from rlab.engine.cli.run import run_headless
from rlab.engine.run.config import RunConfig
from rlab.engine.paths import engine_log_path
from rlab.store.reader import StoreReader

KEY = "rlab-test-secret-0123456789abcdef"


def test_a_bug_at_step_2_keeps_its_traceback_scrubbed_and_the_line_names_where(
        raw_tiny_model_dir, tmp_path, monkeypatch, capsys):
    import rlab.engine.step as step_module

    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    real, calls = step_module.to_batch, []

    def shape_bug(*args, **kwargs):  # a bug of ours in the second step's bookkeeping
        calls.append(1)
        if len(calls) == 2:
            raise TypeError(f"batch shapes (8, 3) and (8, 4) disagree near {KEY}")
        return real(*args, **kwargs)

    monkeypatch.setattr(step_module, "to_batch", shape_bug)
    db = tmp_path / "runs.db"
    config = RunConfig(model=raw_tiny_model_dir, db=db, name="bug", max_steps=3, prompts_per_step=2,
                       group_size=2, eval_size=4, eval_every=100, checkpoint_every=100)
    assert handled(lambda: run_headless(config), config.db) == 1

    line = capsys.readouterr().err.strip().splitlines()[-1]
    log = engine_log_path(db, "bug")
    assert line == (f"rlab: error: the run failed at step 2: internal error (TypeError: batch shapes (8, 3) and "
                    f"(8, 4) disagree near REDACTED); its traceback is in {log} and the run's error event")
    with StoreReader(db) as reader:
        run = reader.run_by_name("bug")
        assert run is not None and run["status"] == "failed" and reader.steps(run["id"]) == [0, 1]
        (event,) = [e for e in reader.events(run["id"]) if e["kind"] == "error"]
    assert event["step"] == 2
    for text in (event["payload"]["traceback"], log.read_text()):
        assert "Traceback (most recent call last)" in text and "in shape_bug" in text
        assert "in train_step" in text and KEY not in text and "REDACTED" in text
    assert Path(log).read_text().startswith("rlab: the run failed at step 2:\n")
