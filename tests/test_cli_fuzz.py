"""A fuzz test of ``rlab run --headless``: random values for each run option,
drawn from its type plus edge values (negative, zero, tiny, huge, NaN,
infinity, empty, non-numeric); every outcome must be a finished run (exit
0, a JSON summary) or exactly one ``rlab: error:`` line (exit 2), never a
traceback.

Seeded and bounded: ``RLAB_FUZZ_CASES`` (default 16) cases in this process
through ``main([...])`` and ``RLAB_FUZZ_SUBPROCESS`` (default 2) of them again
as a real ``rlab`` process. Every run is tiny (one step, two prompts, two
rollouts, two held-out examples) on the untrained tiny model. Left out: the
network targets (``--judge-base-url``, ``--vllm-url``: a value there would
make the run call out), ``--vllm-python`` (a program to start) and ``--db``/``--name``/``--resume``/``--model``,
which the other tests cover; a judge option is always paired with a judge on
a closed local port.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys

import pytest

from rlab.engine.cli.options import add_run_options
from rlab.engine.cli import main as cli

SEED = int(os.environ.get("RLAB_FUZZ_SEED", "19"))
CASES = int(os.environ.get("RLAB_FUZZ_CASES", "16"))
SUBPROCESS = int(os.environ.get("RLAB_FUZZ_SUBPROCESS", "2"))
SKIPPED = {"--db", "--name", "--resume", "--model", "--judge-base-url", "--vllm-url", "--vllm-python", "--help"}
EDGES = {
    "INT": ["-5", "0", "1", "2", "3", str(10**12), "nan", "", "abc", "1.5"],
    "NUM": ["-1", "0", "1e-300", "0.5", "1", "1e308", "nan", "inf", "", "abc"],
    "A,B": ["", ",", "a,b", "1,2", "0.1,0.2,0.3", "x"],
    None: ["", "x", "-1", "nan", "cuda:7"],
}


def _options() -> list[argparse.Action]:
    parser = argparse.ArgumentParser()
    add_run_options(parser)
    return [a for a in parser._actions if a.option_strings and a.option_strings[0] not in SKIPPED]


def _values(action: argparse.Action, rng: random.Random) -> list[list[str]]:
    """Candidate argv pieces for one option: its edge values and a random one."""
    name = action.option_strings[0]
    if action.nargs == 0:  # a flag: --x, --no-x (or an alias)
        return [[s] for s in action.option_strings]
    if action.choices:
        return [[name, c] for c in [*action.choices, "bogus", ""]]
    edges = EDGES.get(action.metavar, EDGES[None])
    drawn = str(rng.randint(-3, 40)) if action.metavar == "INT" else f"{rng.uniform(-1, 3):.3g}"
    return [[name, v] for v in [*edges, drawn]]


def _cases() -> list[list[str]]:
    rng = random.Random(SEED)
    pool = [piece for action in _options() for piece in _values(action, rng)]
    cases = rng.sample(pool, min(CASES, len(pool)))
    for piece in cases:
        if piece[0].startswith(("--judge-", "--no-judge")) and piece[0] != "--judge-model":
            piece += ["--judge-model", "fuzz-judge"]
        if any(p.startswith(("--judge-", "--no-judge")) for p in piece):
            # A closed local port: the judge fails fast, the run skips its update.
            piece += ["--judge-base-url", "http://127.0.0.1:9/v1", "--judge-max-retries", "0"]
    return cases


def _argv(model_dir, db, piece: list[str]) -> list[str]:
    base = {"--model": str(model_dir), "--db": str(db), "--prompts-per-step": "2", "--group-size": "2",
            "--eval-size": "2", "--max-steps": "1", "--max-seconds": "5", "--max-new-tokens": "4"}
    for option in piece:
        base.pop(option, None)  # the fuzzed value replaces the tiny one
    return ["run", "--headless", *[x for kv in base.items() for x in kv], *piece]


def _check(status: int, out: str, err: str, argv: list[str]) -> None:
    assert "Traceback" not in err, (argv, err)
    if status == 0:
        summary = json.loads(out.strip().splitlines()[-1])
        assert summary["status"] == "finished", (argv, summary)
        return
    assert status == 2, (argv, status, err)
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert lines and lines[-1].startswith("rlab: error: "), (argv, err)
    assert sum(line.startswith("rlab: error: ") for line in lines) == 1, (argv, err)


@pytest.mark.slow
def test_fuzzed_run_options_end_in_a_run_or_one_error_line(tmp_path, raw_tiny_model_dir, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RLAB_CACHE_DIR", str(tmp_path / "cache"))
    cases = _cases()
    outcomes = []
    for i, piece in enumerate(cases):
        argv = _argv(raw_tiny_model_dir, tmp_path / f"fuzz-{i}.db", piece)
        try:
            status = cli.main(argv)
        except SystemExit as exit:  # argparse's usage errors
            status = exit.code
        captured = capsys.readouterr()
        _check(status, captured.out, captured.err, argv)
        outcomes.append(status)
    assert 0 in outcomes and 2 in outcomes, "the fuzz drew only one kind of outcome: widen it"


@pytest.mark.slow
def test_fuzzed_run_options_as_a_real_rlab_process(tmp_path, raw_tiny_model_dir):
    cases = _cases()
    for piece in random.Random(SEED).sample(cases, min(SUBPROCESS, len(cases))):
        argv = _argv(raw_tiny_model_dir, tmp_path / "fuzz-sub.db", piece)
        result = subprocess.run([sys.executable, "-P", "-m", "rlab.engine.cli", *argv], cwd=tmp_path,
                                capture_output=True, text=True, timeout=300,
                                env={**os.environ, "RLAB_CACHE_DIR": str(tmp_path / "cache")})
        _check(result.returncode, result.stdout, result.stderr, argv)
