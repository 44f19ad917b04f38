"""``rlab pause``, ``resume``, ``step``, ``stop`` and ``reward``: steer a live run from a shell.

Each queues a command in the run file (``store.control``) that the run's
engine applies at its next safe point, from any process or host that shares
the file, as space, ``n``, ``q`` and the reward editor do in the TUI.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rlab.engine.cli.errors import CliError
from rlab.engine.cli.parsers import Command, Subparsers, add_db
from rlab.engine.train.building import STOP_WAIT_S, Build, find_build, stop_build

if TYPE_CHECKING:
    from rlab.store.reader import StoreReader
    from rlab.store.rows import RunRow

#: Commands that steer a live run from a shell, as space, n and q's "stop" do in the TUI.
CONTROL_COMMANDS = {"pause": "pause a running run at its next step boundary",
                    "resume": "resume a paused run (after an alert paused it, say)",
                    "step": "let a paused run take exactly one more step, then pause again",
                    "stop": "end a running or paused run at its next step boundary (status stopped; "
                            "rlab run --headless --resume RUN continues it)"}


def cmd_control(args: argparse.Namespace) -> int:
    """``rlab pause|resume|step|stop RUN``: queue the command for the run's engine (any process, any host
    that shares the file); the engine applies it at its next safe point. A pause of a paused run,
    or a stop of a run with a stop pending, sends nothing and says so. ``stop`` also ends a run
    whose policy is still being built (``engine.train.building``)."""
    from rlab.store.control import send_command
    from rlab.store.db import existing_run_file
    from rlab.store.reader import StoreReader, resolve_run

    if args.command == "stop" and (build := find_build(Path(args.db), args.run)) is not None:
        return _stop_build(build)
    with StoreReader(existing_run_file(args.db)) as reader:
        run = resolve_run(reader, args.run)
        stopping = _stop_on_its_way(reader, run) if args.command == "stop" else None
    if run["status"] not in ("running", "paused"):
        raise CliError(f"run {run['name']} is {run['status']}; {args.command} steers a running or paused run "
                       f"(start it again with rlab run --headless --resume {run['name']})")
    if args.command == "pause" and run["status"] == "paused":
        print(f"run {run['name']} is already paused; nothing sent (rlab resume {run['name']} continues it, "
              f"rlab step {run['name']} takes one step)")
        return 0
    if stopping is not None:
        print(f"run {run['name']} already has a stop pending (command {stopping['id']}, {stopping['status']}); "
              "nothing sent: it ends at its next step boundary")
        return 0
    command_id = send_command(args.db, run["id"], args.command)
    print(f"sent {args.command} to run {run['name']} (command {command_id}, run {run['status']})")
    return 0


def _stop_on_its_way(reader: StoreReader, run: RunRow) -> dict | None:
    """The stop command the run's engine has yet to carry out, or None: one it has not read
    yet, or one it took since it last started (it ends the run at the step's end; a
    ``--resume`` starts it again, with a ``resume`` event)."""
    started = max((e["created_at"] for e in reader.events(run["id"]) if e["kind"] == "resume"),
                  default=run["created_at"])
    return next((c for c in reversed(reader.commands(run["id"])) if c["kind"] == "stop" and (
        c["status"] == "pending" or c["status"] == "applied" and (c["resolved_at"] or 0) > started)), None)


def _stop_build(build: Build) -> int:
    """``rlab stop RUN`` while RUN's policy is still being built (no run row yet): end the build."""
    if not stop_build(build):
        raise CliError(f"the build of run {build.run} (process {build.pid}) did not end within "
                       f"{STOP_WAIT_S:g} s of SIGTERM; end it with: kill -9 {build.pid}")
    print(f"stopped the build of run {build.run} (process {build.pid}, building for "
          f"{time.time() - build.started:.0f} s); the run was never started, so the run file is as it was")
    return 0


def add_parsers(sub: Subparsers) -> None:
    """Add the control commands and ``reward`` to ``sub``."""
    for kind, what in CONTROL_COMMANDS.items():
        control = sub.add_parser(kind, help=what)
        control.add_argument("run", help="run name or id")
        add_db(control)
    reward = sub.add_parser("reward", help="check, dry-run and apply a new reward file to a live run")
    reward.add_argument("run", help="run name or id")
    reward.add_argument("file", type=Path, help="the new reward file")
    add_db(reward)
    reward.add_argument("--dry-run", action="store_true", help="print the check and the dry run; apply nothing")
    reward.add_argument("--wait", type=float, default=120.0, help="seconds to wait for the engine to apply it")


def cmd_reward(args: argparse.Namespace) -> int:
    from rlab.engine.rewards.edit.submit import submit

    print(submit(args.db, args.run, args.file, dry_run=args.dry_run, wait_s=args.wait).text)
    return 0


#: This group's handlers by command name.
COMMANDS: dict[str, Command] = {**dict.fromkeys(CONTROL_COMMANDS, cmd_control), "reward": cmd_reward}
