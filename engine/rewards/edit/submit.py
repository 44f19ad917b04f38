"""``rlab reward RUN FILE``: the reward editor's path, from a shell.

The same steps as ``e`` in the TUI (tui/reward_editor.py): the new file is
checked and dry-run next to the applied version on the run's last K groups
in one separate, time-limited process (``engine.rewards.edit.check.check_edit``);
the dry run is printed (per group: mean reward and ranking, old -> new; per
trajectory whose reward changes: old -> new and the completion); then the
version is sent as a ``set_rewards`` command and the engine applies it at
its next step boundary, after its own gate (``engine.rewards.edit.gate``). A
rejected edit raises :class:`EditRejected` with the reason.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlab.engine.rewards.edit.check import DEFAULT_TIMEOUT_S, check_edit
from rlab.engine.rewards.edit.compare import DryRunReport
from rlab.engine.rewards.edit.gate import CHECK_GROUPS, EditRejected
from rlab.engine.rewards.edit.stored import recent_groups
from rlab.engine.rewards.success import SuccessError, SuccessRule
from rlab.store.control import LIVE_STATUSES, send_command, wait_for_command
from rlab.store.db import existing_run_file
from rlab.store.reader import StoreReader, resolve_run
from rlab.store.records import DEFAULT_SUCCESS_THRESHOLD
from rlab.store.rows import RunRow
from rlab.store.secrets import scrub_text
from rlab.store.writer import StoreWriter


@dataclass
class Submitted:
    """What ``rlab reward`` did: the printed dry run, and the command's fate.

    ``status`` is ``"dry-run"``, ``"applied"`` (the engine switched to
    ``version``), ``"queued"`` (the run is paused, or the engine did not
    answer within the wait; it applies the edit at its next step) or
    ``"for resume"`` (the run is not running: the version is recorded and
    ``--resume`` trains with it from the step after the last checkpoint).
    """

    text: str
    status: str
    command_id: int | None = None
    version: int | None = None


def dry_run_text(report: DryRunReport | None, groups: list[dict[str, Any]], width: int = 40) -> str:
    """The dry run as lines: totals, one line per group, one per changed trajectory."""
    if report is None:
        return "dry run: no groups stored yet, nothing to compare"
    lines = [f"dry run on the last {len(report.groups)} groups: mean reward {report.old_mean:.3f} -> "
             f"{report.new_mean:.3f}; ranking changes in {report.groups_ranking_changed} groups"]
    if report.new_errors:
        lines.append(f"the new version errored on {report.new_errors} trajectories: {report.first_error}")
    for g, group in zip(report.groups, groups):
        lines.append(f"group {g.index}: mean {g.old_mean:.3f} -> {g.new_mean:.3f}  "
                     f"ranking {'changed' if g.ranking_changed else 'same'}")
        for j, (old, new) in enumerate(zip(g.old_rewards, g.new_rewards)):
            if old != new:
                text = repr(group["trajectories"][j]["completion"])[:width]
                lines.append(f"    trajectory {j}: {old:.3f} -> {new:.3f}  {text}")
    return "\n".join(lines)


def submit(db: Path, run: str, file: Path, *, dry_run: bool = False, k: int = CHECK_GROUPS,
           wait_s: float = 120.0, timeout_s: float = DEFAULT_TIMEOUT_S) -> Submitted:
    """Check ``file`` against run ``run``'s last ``k`` groups; unless ``dry_run``, apply it.

    Args:
        db: the run file. run: run name or id. file: the new reward file.
        dry_run: print the check and the dry run only; send nothing.
        k: groups to dry-run (the editor's default, 8).
        wait_s: how long to wait for a running engine to apply the edit, seconds.
        timeout_s: per-call and import limit of the check, seconds.

    Raises:
        FileNotFoundError: no run file at ``db``, or no ``file``.
        RunNotFoundError: no such run.
        EditRejected: the check failed, the edit drops the run's success
            function, or the engine rejected the edit; the message says why.
    """
    existing_run_file(db)
    try:
        source = Path(file).read_text(encoding="utf-8")
    except OSError as err:  # a missing file, a folder, no permission
        raise FileNotFoundError(f"cannot read the reward file {file} ({err.strerror}); pass the path of a "
                                "rewards.py, e.g. the run's own: rlab_runs/<run file>/<run>/rewards.py") from None
    reader = StoreReader(db)
    row = resolve_run(reader, run)
    versions = reader.reward_versions(row["id"])
    applied = versions[-1]["source"] if versions else None
    groups = recent_groups(reader, row["id"], k)
    filename = Path(file).name  # errors name the file the user wrote, not the run's copy
    # `rlab reward` is a terminal command: what the reward code printed is shown (scrubbed), as a run's log shows it
    result, report = check_edit(applied, source, groups, timeout_s, filename=filename, printed=sys.stderr)
    if not result.ok:
        raise EditRejected(f"{file} not applied: {result.message}")
    config = row.get("config") or {}
    try:
        SuccessRule(config.get("success"), config.get("success_threshold", DEFAULT_SUCCESS_THRESHOLD)).check(
            result.weights, str(file), edit=True)
    except SuccessError as err:
        raise EditRejected(f"{file} not applied: {err}") from None
    # printed on this command's own streams, which are not the engine's scrubbed log; an error may quote a key
    text = scrub_text(f"{result.message}\n{dry_run_text(report, groups)}")
    if dry_run:
        return Submitted(text, "dry-run")
    if row["status"] not in LIVE_STATUSES:
        return _for_resume(db, reader, row, source, result.weights, text)
    command_id = send_command(db, row["id"], "set_rewards", {"source": source, "weights": result.weights,
                                                            "filename": filename})
    return _await(row, Path(db), command_id, text, wait_s)


def _for_resume(db: Path, reader: StoreReader, row: RunRow, source: str, weights: dict[str, float],
                text: str) -> Submitted:
    """Record the version for a run that is not running: ``--resume`` trains with it from the
    step after the last checkpoint (``engine.rewards.edit.timeline``), the way out of a version
    that made the run fail."""
    checkpoints = reader.checkpoints(row["id"])
    step = (checkpoints[-1]["step"] if checkpoints else 0) + 1
    version = max((v["version"] for v in reader.reward_versions(row["id"])), default=1) + 1
    with StoreWriter(db) as writer:
        sha = writer.write_reward_version(row["id"], version, source, weights)
        writer.write_event(row["id"], "reward_edit", {"version": version, "sha256": sha, "weights": weights,
                                                      "for_resume": True}, step=step)
    return Submitted(f"{text}\nrun {row['name']} is {row['status']}: recorded as reward version {version}; "
                     f"`rlab run --headless --resume {row['name']}` trains with it from step {step}",
                     "for resume", version=version)


def _await(row: RunRow, db: Path, command_id: int, text: str, wait_s: float) -> Submitted:
    """Wait for the engine to resolve the command (``store.control.wait_for_command``)."""
    command = wait_for_command(db, row["id"], command_id, wait_s)
    if command is None:
        return Submitted(f"{text}\nqueued (command {command_id}): the engine applies it at its next step "
                         "boundary once the run goes on", "queued", command_id)
    if command["status"] == "rejected":
        raise EditRejected(f"the engine rejected the edit: {command['message']}")
    with StoreReader(db) as reader:
        version = reader.reward_versions(row["id"])[-1]["version"]
    return Submitted(f"{text}\napplied: reward version {version} from the next step", "applied", command_id, version)
