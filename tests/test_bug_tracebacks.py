"""A bug of ours is never a user error (issue 58): a bare KeyError from inside the fork's plan, the
task loader (before a run starts) or the follower keeps its traceback on the terminal and exits 1,
where it printed one `rlab: error:` line. Each runs the real command line in its own process with
the one function replaced by one that raises."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

BUGS = {
    "plan_fork": ("rlab.engine.run.fork", "plan_fork"),
    "task loader": ("rlab.scenarios.task_file", "_from_spec"),
    "follower": ("rlab.store.formats.follow.Follower", "poll"),
}


def rlab_with_a_bug(where: str, args: list[str]) -> subprocess.CompletedProcess:
    """``rlab ARGS`` in a fresh process, ``where``'s function raising a bare KeyError."""
    module, name = BUGS[where]
    owner = module.rsplit(".", 1) if where == "follower" else (module, None)
    code = textwrap.dedent(f"""
        import importlib, sys
        def bug(*args, **kwargs):
            raise KeyError("an internal key")
        target = importlib.import_module({owner[0]!r})
        target = getattr(target, {owner[1]!r}) if {owner[1]!r} else target
        setattr(target, {name!r}, bug)
        from rlab.engine.cli.main import main
        sys.exit(main({args!r}))
    """)
    return subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=300)


def task(tmp_path):
    (tmp_path / "train.jsonl").write_text(json.dumps({"prompt": "1+1=", "answer": "2"}) + "\n")
    (tmp_path / "rewards.py").write_text("def correct(example, completion):\n    return 1.0\n")
    (tmp_path / "task.toml").write_text('train = "train.jsonl"\nrewards = "rewards.py"\n')
    return tmp_path / "task.toml"


@pytest.mark.parametrize("where", BUGS)
def test_a_bare_key_error_of_ours_keeps_its_traceback_and_exits_1(tmp_path, where):
    db = str(tmp_path / "runs.db")
    args = {"plan_fork": ["fork", "parent@latest", "--name", "child", "--db", db, "--headless"],
            "task loader": ["run", "--headless", "--task", str(task(tmp_path)), "--db", db],
            "follower": ["follow", str(tmp_path), "--db", db, "--name", "followed", "--idle-exit", "1"]}[where]
    done = rlab_with_a_bug(where, args)
    assert done.returncode == 1, done.stderr
    assert "Traceback (most recent call last)" in done.stderr and "KeyError: 'an internal key'" in done.stderr
    assert "rlab: error:" not in done.stderr


def test_a_user_error_keeps_its_one_line_and_exit_2(tmp_path):
    done = subprocess.run([sys.executable, "-P", "-m", "rlab.engine.cli", "follow", str(tmp_path), "--db",
                           str(tmp_path / "runs.db"), "--name", "f", "--format", "inspect"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == ["rlab: error: cannot follow 'inspect' output; follow one of trl, "
                                                "verl, art"]
