"""The ``rlab`` command line's dispatcher: one parser, one handler per command, one way to fail.

    rlab                          TUI + a new run of the default scenario
    rlab run --headless [...]     train without the TUI, end with one JSON line
    rlab fork RUN@STEP --name NEW [run options] [--rewards FILE]   a new run from RUN's checkpoint
    rlab set RUN KEY=VALUE ...    change a live run's settings between two steps
    rlab watch [--db PATH] [RUN]  attach the TUI to a run (running or finished)
    rlab watch --follow DIR [--db PATH] [NAME]   import a trainer's files live, watch them
    rlab follow DIR --db PATH --name NAME   the importer behind watch --follow, without the TUI
    rlab runs [--db PATH] [--json]
    rlab export RUN --out DIR [--db PATH] [--format rlab|verifiers|trl|art]
    rlab import PATH [--db PATH] [--name NAME] [--format trl|verifiers|art|inspect|verl]
    rlab index [--db PATH]
    rlab eval [--scenario S] [--model M | --checkpoint RUN[@STEP] | --completions FILE]
    rlab select -n N [--k 1,2,4] [...]
    rlab compare RUN_A RUN_B [--force] [--json]
    rlab inspect RUN [--only-fails] [--top-k K] [--step S] [--json]
    rlab pause|resume|step|stop RUN [--db PATH]   steer a live run from a shell
    rlab reward RUN FILE [--db PATH] [--dry-run]
    rlab serve MODEL [--port P] [--lora] [--vllm-python PATH]   a local vLLM server, until Ctrl-C

Each command group is a module of this package with ``add_parsers`` and
``COMMANDS``. The TUI is reached through ``engine.cli.frontend``, so the
engine process (``rlab run --headless``) never loads textual.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

from rlab.engine.cli import control, files, loops, run, serve, watch
from rlab.engine.cli.errors import ArgumentParser, handled
from rlab.engine.cli.parsers import DEFAULT_DB, Command


#: Every command's handler by name.
COMMANDS: dict[str, Command] = {**run.COMMANDS, **watch.COMMANDS, **files.COMMANDS, **loops.COMMANDS,
                                **control.COMMANDS, **serve.COMMANDS}


def build_parser(*, run_options: bool = True) -> argparse.ArgumentParser:
    """The parser of every ``rlab`` command.

    ``run_options=False`` leaves the run options (generated from RunConfig,
    whose import pulls in the judge's openai client) out: ``rlab runs``,
    ``export`` and ``watch`` start faster without them.
    """
    parser = ArgumentParser(prog="rlab", description="Rollout Lab: watch RL on language models. "
                            "Bare `rlab [run options]` is `rlab run`.")
    sub = parser.add_subparsers(dest="command", parser_class=ArgumentParser)
    run.add_parsers(sub, run_options=run_options)
    for group in (watch, files, loops, control, serve):
        group.add_parsers(sub)
    parser.set_defaults(command_parsers=sub.choices)  # each command's parser, for _unrecognized's hint
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``rlab``; returns the exit status.

    A user's error (bad option values, unknown scenario, missing model
    directory, unwritable, damaged or read-only-and-old run file, unknown or
    still running run) prints one ``rlab: error: ...`` line naming the
    problem and the fix and exits with status 2, without a traceback; a bug
    keeps its traceback (``engine.cli.errors.handled``).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    argv = _with_command(argv)
    parser = build_parser(run_options=argv[0] in run.WITH_RUN_OPTIONS)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _unrecognized(parser, args.command_parsers[args.command], unknown)
    args.argv = argv[1:]
    return handled(lambda: COMMANDS[args.command](args), Path(getattr(args, "db", DEFAULT_DB)))


def _with_command(argv: list[str]) -> list[str]:
    """``argv`` with ``run`` put first when it names no command (bare
    ``rlab --scenario X`` is ``rlab run --scenario X``); help stays the top's."""
    if argv and (argv[0] in COMMANDS or argv[0] in ("-h", "--help")):
        return argv
    return [run.RUN, *argv]


def _unrecognized(parser: argparse.ArgumentParser, command: argparse.ArgumentParser, unknown: list[str]) -> None:
    """Exit (status 2) naming the first unknown option, the closest of ``command``'s (read off its
    help, argparse's public view of them), and the command's help."""
    known = re.findall(r"(?<![\w-])--?[A-Za-z][\w-]*", command.format_help())
    word = next((u for u in unknown if u.startswith("-")), unknown[0]).split("=")[0]
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    parser.exit(2, f"rlab: error: unrecognized argument {word}{hint} (see `{command.prog} --help`)\n")
