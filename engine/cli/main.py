"""The ``rlab`` command line's dispatcher: one parser, one handler per command, one way to fail.

    rlab                          TUI + a new run of the default scenario
    rlab run --headless [...]     train without the TUI, end with one JSON line
    rlab fork RUN@STEP --name NEW [run options] [--rewards FILE]   a new run from RUN's checkpoint
    rlab set RUN KEY=VALUE ...    change a live run's settings between two steps
    rlab watch [--db PATH] [RUN]  attach the TUI to a run (running or finished)
    rlab watch --follow DIR [--db PATH] [NAME]   import a trainer's files live, watch them
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
import sqlite3
import sys

from rlab.engine.cli import control, files, loops, run, serve, watch
from rlab.engine.cli.errors import ArgumentParser, CliError, error_line, expected_errors, file_errors
from rlab.engine.cli.parsers import DEFAULT_DB, Command

#: The commands that load a model (or start a server), and so may raise the engine's own errors.
LOADS_A_MODEL = (*run.WITH_RUN_OPTIONS, "eval", "select", "serve")


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
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``rlab``; returns the exit status.

    Expected failures (bad option values, unknown scenario, missing model
    directory, unwritable, damaged or read-only-and-old run file, unknown or
    still running run) print one ``rlab: error: ...`` line naming the
    problem and the fix and exit with status 2, without a traceback
    (``engine.cli.errors``).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    argv = _with_command(argv)
    parser = build_parser(run_options=argv[0] in run.WITH_RUN_OPTIONS)
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _unrecognized(parser, args.command, unknown)
    args.argv = argv[1:]
    try:
        return COMMANDS[args.command](args)
    except CliError as err:  # before the engine's errors: naming them imports torch
        print(error_line(err), file=sys.stderr)
        return 2
    except (expected_errors() if args.command in LOADS_A_MODEL else file_errors()) as err:
        if isinstance(err, sqlite3.DatabaseError) and not isinstance(err, sqlite3.OperationalError):
            from rlab.store.db import read_error

            err = read_error(getattr(args, "db", DEFAULT_DB), err)
        print(error_line(err), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rlab: interrupted", file=sys.stderr)
        return 130


def _with_command(argv: list[str]) -> list[str]:
    """``argv`` with ``run`` put first when it names no command (bare
    ``rlab --scenario X`` is ``rlab run --scenario X``); help stays the top's."""
    if argv and (argv[0] in COMMANDS or argv[0] in ("-h", "--help")):
        return argv
    return [run.RUN, *argv]


def _unrecognized(parser: argparse.ArgumentParser, command: str, unknown: list[str]) -> None:
    """Exit (status 2) naming the first unknown option, the closest known one, and the command's help."""
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    known = [flag for action in subparsers.choices[command]._actions for flag in action.option_strings]
    word = next((u for u in unknown if u.startswith("-")), unknown[0]).split("=")[0]
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    parser.exit(2, f"rlab: error: unrecognized argument {word}{hint} (see `rlab {command} --help`)\n")
