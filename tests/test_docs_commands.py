"""Every shell block in README.md and docs/*.md runs as documented (issue 40).

The blocks are read from the markdown itself (markdown-it-py), so a doc edit
that breaks a command fails here. An HTML comment right before a block's
fence says how it is run; a block without one runs in the default lane::

    <!-- docs-test: DIRECTIVE; DIRECTIVE ... -->

    reference        a table of syntax with placeholders (RUN, DIR, [--db rlab.db],
                     verifiers|trl|art, ...): its rlab commands are parsed, nothing runs
    ci               .ci/run runs the block's commands (after its budget), each as one
                     of its lines
    slow             runs only with -m slow
    budget: ARGS     ARGS are appended to every `rlab run` (or bare `rlab`) command of
                     the block: the TUI becomes a short headless run
    needs: M1, M2    runs only where these modules import (the block's install done)
    xfail: REASON    runs and is expected to fail (strict): a documented command broken today
    skip: REASON     not run (a GPU, a server, hours of training); the reason is listed

A block runs under ``bash -e -o pipefail`` in a fresh folder that links the
repository's top-level entries and ``.venv`` (this test's venv), with that
venv's bin first on PATH and a fresh RLAB_CACHE_DIR shared by the session.
Every ``rlab ...`` command of every block, skipped ones included, is also
parsed by rlab's own command line (nothing runs): placeholders are
expanded first, and a command with a shell expansion ($) is left out.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from rlab.engine.cli import main as cli

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL_FENCES = {"bash", "sh", "shell"}
MARKER = re.compile(r"<!--\s*docs-test:(?P<directives>.*?)-->", re.S)
DIRECTIVES = {"reference", "ci", "slow", "budget", "needs", "xfail", "skip"}
OPERATORS = {"&&", "||", ";", "&", "|"}
#: Seconds a block may run, by lane.
TIMEOUT_S = {"default": 120, "slow": 900}


@dataclass
class Block:
    """One shell block of the docs and what its marker says."""

    where: str  # "README.md:17", the fence's line
    text: str
    directives: dict[str, str] = field(default_factory=dict)

    def commands(self) -> list[str]:
        """The block's logical lines (backslash continuations joined), comment-only lines left out."""
        joined = self.text.replace("\\\n", " ")
        return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def parse_marker(where: str, comment: str) -> dict[str, str]:
    """``{"slow": "", "budget": "--headless ..."}`` from ``<!-- docs-test: slow; budget: ... -->``."""
    directives = {}
    for part in MARKER.fullmatch(comment.strip())["directives"].split(";"):
        name, _, value = part.partition(":")
        name = name.strip()
        if name not in DIRECTIVES:
            raise ValueError(f"{where}: unknown docs-test directive {name!r}; known: {sorted(DIRECTIVES)}")
        directives[name] = value.strip()
    return directives


def doc_blocks() -> list[Block]:
    """Every shell block of README.md and docs/*.md, with the directives of the comment before it."""
    blocks = []
    for path in DOCS:
        tokens = MarkdownIt("commonmark").parse(path.read_text())
        for before, token in zip([None, *tokens], tokens):
            where = f"{path.relative_to(REPO)}:{token.map[0] + 1}" if token.map else str(path)
            marked = before is not None and before.type == "html_block" and MARKER.search(before.content)
            is_shell = token.type == "fence" and token.info.strip() in SHELL_FENCES
            if token.type == "fence" and token.info.strip() == "console":
                raise ValueError(f"{where}: write shell commands in a bash fence, not console")
            if marked and not is_shell:
                raise ValueError(f"{where}: a docs-test marker must come right before a bash fence")
            if is_shell:
                directives = parse_marker(where, before.content) if marked else {}
                blocks.append(Block(where, token.content, directives))
    return blocks


def words(line: str, punctuation: bool | str = ";&") -> list[str]:
    """A command line's words as the shell splits them (quotes removed, comment dropped); by
    default only ``;`` and ``&`` split words, so a reference's ``a|b`` stays one word."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=punctuation)
    lexer.whitespace_split = True
    return list(lexer)


def segments(tokens: list[str]) -> list[list[str]]:
    """``tokens`` split into simple commands at the shell's operators."""
    out: list[list[str]] = [[]]
    for token in tokens:
        if token in OPERATORS:
            out.append([])
        else:
            out[-1].append(token)
    return [segment for segment in out if segment]


def rlab_argv(segment: list[str]) -> list[str] | None:
    """The arguments after ``rlab`` (or ``.venv/bin/rlab``) in a simple command; None if it runs no rlab."""
    for i, word in enumerate(segment):
        if word == "rlab" or word.endswith("/bin/rlab"):
            return segment[i + 1:]
    return None


def starts_run(argv: list[str]) -> bool:
    """``rlab run ...`` or bare ``rlab [run options]`` (the TUI and a new run)."""
    return not argv or argv[0] == cli.run.RUN or argv[0] not in cli.COMMANDS


def with_budget(line: str, budget: str) -> str:
    """``line`` with ``budget`` appended to each of its rlab runs."""
    tokens = words(line, punctuation=True)
    if not budget or not any(starts_run(argv) for argv in map(rlab_argv, segments(tokens)) if argv is not None):
        return line
    assert "$" not in line, f"a budget cannot rewrite a line with shell expansions: {line}"
    out, command = [], []
    for token in [*tokens, ";"]:
        if token not in OPERATORS:
            command.append(token)
            continue
        argv = rlab_argv(command)
        if argv is not None and starts_run(argv):
            command += shlex.split(budget)
        out += [*map(shlex.quote, command), token]
        command = []
    return " ".join(out[:-1])


def expanded(argv: list[str]) -> list[list[str]]:
    """A reference line's argv with its placeholders filled: ``...`` dropped, ``[x]``
    taken as ``x``, and one argv per alternative of ``a|b|c``."""
    argv = [word.strip("[]") for word in argv if word != "..."]
    choices = [word.split("|") for word in argv]
    return [[alternatives[min(i, len(alternatives) - 1)] for alternatives in choices]
            for i in range(max(map(len, choices), default=1))]


BLOCKS = doc_blocks()


def lane(block: Block) -> str:
    return "slow" if "slow" in block.directives else "default"


def marks(block: Block) -> list[pytest.MarkDecorator]:
    """The pytest marks the block's directives ask for."""
    d = block.directives
    out = [pytest.mark.timeout(TIMEOUT_S[lane(block)] + 60)]
    if "slow" in d:
        out.append(pytest.mark.slow)
    if "skip" in d:
        out.append(pytest.mark.skip(reason=f"{block.where}: {d['skip']}"))
    if "reference" in d:
        out.append(pytest.mark.skip(reason=f"{block.where}: a table of syntax with placeholders: "
                                           "parsed (test_rlab_commands_parse), not run"))
    missing = [m for m in re.split(r"[,\s]+", d.get("needs", "")) if m and importlib.util.find_spec(m) is None]
    if missing:
        out.append(pytest.mark.skip(reason=f"{block.where}: needs {', '.join(missing)} (not installed)"))
    if "xfail" in d:
        out.append(pytest.mark.xfail(strict=True, reason=f"{block.where}: {d['xfail']}"))
    return out


def params(blocks: list[Block]) -> list:
    return [pytest.param(b, id=b.where, marks=marks(b)) for b in blocks]


def test_every_bash_fence_is_a_block():
    """The markdown reader finds every ```bash fence a plain text search finds, in every file."""
    for path in DOCS:
        found = [b for b in BLOCKS if b.where.startswith(f"{path.relative_to(REPO)}:")]
        assert len(found) == path.read_text().count("\n```bash\n"), path
    assert len(BLOCKS) > 30


RLAB_BLOCKS = [b for b in BLOCKS if any(rlab_argv(s) is not None for c in b.commands() for s in segments(words(c)))]


@pytest.mark.parametrize("block", [pytest.param(b, id=b.where) for b in RLAB_BLOCKS])
def test_rlab_commands_parse(block, monkeypatch, capsys):
    """Each ``rlab`` command of the block is one rlab's own command line accepts
    (subcommand, flags, choices); the commands are parsed, not run."""
    monkeypatch.setattr(cli, "COMMANDS", dict.fromkeys(cli.COMMANDS, lambda args: 0))
    checked = 0
    for line in block.commands():
        for segment in segments(words(line)):
            argv = rlab_argv(segment)
            if argv is None or any("$" in word for word in argv):
                continue
            for variant in expanded(argv):
                try:
                    status = cli.main(variant)
                except SystemExit as exit_:
                    status = exit_.code
                assert status == 0, f"{block.where}: `rlab {shlex.join(variant)}`: {capsys.readouterr().err}"
                checked += 1
    assert checked, f"{block.where}: no rlab command could be checked"


def run_block(block: Block, folder: Path, cache: Path) -> subprocess.CompletedProcess:
    """Run the block with bash in ``folder``, killing its process group when it runs past its lane's time."""
    budget = block.directives.get("budget", "")
    script = "\n".join(with_budget(line, budget) for line in block.commands())
    env = {**os.environ, "PATH": f"{Path(sys.prefix) / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "RLAB_CACHE_DIR": str(cache)}
    proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", script], cwd=folder, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S[lane(block)])
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{block.where} ran past {TIMEOUT_S[lane(block)]} s:\n{script}\n{out[-3000:]}")
    return subprocess.CompletedProcess(script, proc.returncode, out)


def checkout(folder: Path) -> Path:
    """``folder`` holding links to the repository's top-level entries (tracked or not ignored) and .venv."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            check=True, capture_output=True, text=True).stdout.splitlines()
    for name in {Path(p).parts[0] for p in listed}:
        (folder / name).symlink_to(REPO / name)
    (folder / ".venv").symlink_to(sys.prefix)
    return folder


@pytest.fixture(scope="session")
def docs_cache(tmp_path_factory):
    """An empty rlab cache, shared by the session's blocks (a new task's tiny policy is built once)."""
    return tmp_path_factory.mktemp("rlab-cache")


def ci_lines() -> list[list[str]]:
    return [words(line, punctuation=True) for line in (REPO / ".ci" / "run").read_text().splitlines()]


@pytest.mark.parametrize("block", params(BLOCKS))
def test_block(block, tmp_path, docs_cache):
    """The block does what its marker says: .ci/run runs a ci block; any other runs
    here (exit status 0) unless skipped."""
    if "ci" in block.directives:
        budget = block.directives.get("budget", "")
        for line in block.commands():
            assert words(with_budget(line, budget), punctuation=True) in ci_lines(), \
                f"{block.where}: .ci/run does not run `{with_budget(line, budget)}`"
        return
    result = run_block(block, checkout(tmp_path), docs_cache)
    assert result.returncode == 0, f"{block.where} exited {result.returncode}:\n{result.args}\n{result.stdout[-3000:]}"
