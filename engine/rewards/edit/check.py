"""Validate and dry-run a reward-file edit in a separate, time-limited process.

A new version of a reward file is never imported into the engine or the TUI
until it has passed here: :func:`validate` loads it and scores a few samples
in the user-code child process (``engine.rewards.child``: memory-capped, in
a scratch directory; isolation, not a security boundary), started for this
one request, and turns every way it
can fail (syntax error, import error, exception, non-numeric or non-finite
reward, time-out) into a :class:`ValidationResult` with a clear message and
the line number. :func:`dry_run` scores stored groups with the old and the
new version in the same kind of process and compares them
(:mod:`engine.rewards.edit.compare`).

The request is the worker's ``check`` kind (``engine.rewards.worker``). Hangs are caught inside the child by the rubric's
per-call watchdog, hangs that hold the GIL or happen at import time by
``faulthandler.dump_traceback_later`` (which prints the stuck line), and
anything else by the parent's wall-clock limit.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

from pydantic import BaseModel

from rlab.engine.rewards.child import UserCodeProcess
from rlab.engine.rewards.edit.compare import DryRunReport, compare_groups
from rlab.engine.rewards.time_limits import DEFAULT_TIMEOUT_S
from rlab.engine.rewards.worker import scoring_limit
from rlab.store.secrets import scrub_text


class ValidationResult(BaseModel):
    """Outcome of checking one reward-file version.

    Attributes:
        ok: True when the file loaded and every sample scored to a finite
            reward.
        kind: None when ok, else ``"syntax"``, ``"import"``, ``"exception"``
            (raised while loading or scoring), ``"weights"``, ``"signature"``,
            ``"bad_reward"`` (non-numeric or non-finite), ``"timeout"`` or
            ``"crash"`` (the check process died).
        message: one human-readable line (more for syntax errors) naming the
            problem, the file and the line.
        lineno: 1-based line of the problem in the reward file, or None.
        weights: the rubric's WEIGHTS (empty unless it loaded).
        sha256: hex sha256 of the source (empty unless it loaded).
        rewards: total reward of each sample, in order (when ok).
    """

    ok: bool
    kind: str | None = None
    message: str
    lineno: int | None = None
    weights: dict[str, float] = {}
    sha256: str = ""
    rewards: list[float] = []


class RewardCheckError(RuntimeError):
    """A dry run that could not be done; ``result`` says why."""

    def __init__(self, result: ValidationResult):
        super().__init__(result.message)
        self.result = result


def validate(
    source: str,
    sample_examples: Sequence[Mapping[str, Any]],
    sample_completions: Sequence[Any],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    filename: str = "rewards.py",
) -> ValidationResult:
    """Load ``source`` and score the samples in a separate process.

    Args:
        source: the reward file's text.
        sample_examples: example dicts (JSON-serialisable), one per sample.
        sample_completions: completions (JSON-serialisable), same length;
            both may be empty to check loading only.
        timeout_s: seconds allowed for the import and for each reward call;
            scoring all samples is also bounded
            (``engine.rewards.worker.scoring_limit``).
        filename: the name messages give the file.

    Returns:
        ``ok=True`` with the weights, sha256 and sample rewards, or
        ``ok=False`` with ``kind``, ``message`` and ``lineno`` of the first
        problem. Nothing in the calling process is changed either way.

    Raises:
        ValueError: the sample lists differ in length, or are not JSON.
    """
    if len(sample_examples) != len(sample_completions):
        raise ValueError(
            f"validate needs one example per completion: got {len(sample_examples)} and "
            f"{len(sample_completions)}"
        )
    groups = [[(e, c) for e, c in zip(sample_examples, sample_completions)]]
    answer = _run_child({"new": source}, groups, timeout_s, filename)
    return _verdict(answer["new"], filename)


def dry_run(
    old_source: str | None,
    new_source: str,
    groups: Sequence[Mapping[str, Any]],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    filename: str = "rewards.py",
) -> DryRunReport:
    """Re-score stored groups with the new rubric and compare with the old.

    Args:
        old_source: the applied reward file, re-scored on the same
            trajectories; None to use each trajectory's stored ``reward``.
        new_source: the edited reward file.
        groups: ``{"trajectories": [{"example": dict, "completion": ...,
            "reward": float}, ...]}`` per group, e.g. the last K groups of
            the run.
        timeout_s: per-call and import limit in seconds, as in validate.
        filename: the name messages give the file.

    Returns:
        A :class:`DryRunReport`; new-rubric scoring errors are counted in it
        (their trajectories score 0), not raised.

    Raises:
        RewardCheckError: the old or the new version does not load, or the
            check process timed out or crashed (``.result`` says which).
        ValueError: a group is malformed (no trajectories list, a trajectory
            without example/completion, or without reward when old_source is
            None).
    """
    pairs, answer = _score_groups(old_source, new_source, groups, timeout_s, filename)
    return _compare(pairs, answer, filename)


def check_edit(
    old_source: str | None,
    new_source: str,
    groups: Sequence[Mapping[str, Any]],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    filename: str = "rewards.py",
    printed: TextIO | None = None,
) -> tuple[ValidationResult, DryRunReport | None]:
    """:func:`validate` on the groups' trajectories, then :func:`dry_run`, in one child process.

    What the reward editor runs on each save: half the process start-ups of
    calling the two in turn.

    Args:
        old_source, new_source, groups, timeout_s, filename: as in dry_run;
            ``groups`` may be empty (then only loading is checked).

    Returns:
        (validation of the new version on every trajectory, the dry-run
        report or None when the new version is invalid or there are no
        groups). When the old version fails to load the validation is
        ``ok=False`` with a message naming the applied reward file.
        ``printed``: where what the reward code printed goes, scrubbed of
        secrets, when the check finished (``rlab reward``: the terminal); a
        check that hung or died keeps it for its one-line verdict.

    Raises:
        ValueError: a group is malformed, as in dry_run.
    """
    pairs, answer = _score_groups(old_source, new_source, groups, timeout_s, filename, printed)
    result = _verdict(answer["new"], filename)
    if not result.ok or not pairs:
        return result, None
    try:
        return result, _compare(pairs, answer, filename)
    except RewardCheckError as exc:
        return exc.result, None


def _score_groups(old_source, new_source, groups, timeout_s, filename, printed: TextIO | None = None):
    """Score every trajectory of ``groups`` with both sources in one child."""
    pairs = [_pairs(k, g, need_reward=old_source is None) for k, g in enumerate(groups)]
    sources = {"new": new_source} if old_source is None else {"old": old_source, "new": new_source}
    answer = _run_child(sources, [[(e, c) for e, c, _ in g] for g in pairs], timeout_s, filename, printed)
    return pairs, answer


def _compare(pairs, answer: dict[str, Any], filename: str) -> DryRunReport:
    """The dry-run report from the child's answer (stored rewards when there is no old source)."""
    scored = {}
    for side, reply in answer.items():
        if "results" not in reply:
            result = _verdict(reply, filename)
            label = "the applied reward file" if side == "old" else filename
            raise RewardCheckError(result.model_copy(update={"message": f"{label}: {result.message}"}))
        scored[side] = reply["results"]
    new = [[r["reward"] for r in g] for g in scored["new"]]
    if "old" not in scored:
        old, old_errors = [[float(r) for _, _, r in g] for g in pairs], 0
    else:
        old, old_errors = [[r["reward"] for r in g] for g in scored["old"]], _errors(scored["old"])
    new_errs = [r["error"] for g in scored["new"] for r in g if r["error"]]
    return compare_groups(
        old, new, old_errors=old_errors, new_errors=len(new_errs), first_error=new_errs[0] if new_errs else None
    )


def _pairs(k: int, group: Mapping[str, Any], *, need_reward: bool) -> list[tuple[Any, Any, Any]]:
    """(example, completion, stored reward) of each trajectory of group k."""
    trajectories = group.get("trajectories") if isinstance(group, Mapping) else None
    if not isinstance(trajectories, list):
        raise ValueError(f"group {k} must be a dict with a 'trajectories' list")
    out = []
    for j, t in enumerate(trajectories):
        if "example" not in t or "completion" not in t or (need_reward and "reward" not in t):
            needed = "example, completion and reward" if need_reward else "example and completion"
            raise ValueError(f"group {k} trajectory {j} needs {needed}; got keys {sorted(t)}")
        out.append((t["example"], t["completion"], t.get("reward")))
    return out


def _errors(groups: list[list[dict[str, Any]]]) -> int:
    return sum(1 for g in groups for r in g if r["error"])


def _verdict(reply: dict[str, Any], filename: str) -> ValidationResult:
    """Turn one source's child reply into a ValidationResult."""
    if "results" not in reply:
        return ValidationResult(ok=False, **reply["failure"])
    results = [r for g in reply["results"] for r in g]
    failed = next((r for r in results if r["error"]), None)
    if failed is not None:
        details = failed["details"]
        return ValidationResult(
            ok=False, kind=details.get("error_kind"), message=failed["error"], lineno=details.get("error_line")
        )
    n = len(results)
    message = f"{filename} is valid: weights {reply['weights']}, scored {n} sample{'s' * (n != 1)}"
    return ValidationResult(
        ok=True, message=message, weights=reply["weights"], sha256=reply["sha256"],
        rewards=[r["reward"] for r in results],
    )


def _run_child(
    sources: dict[str, str], groups: list[list[tuple[Any, Any]]], timeout_s: float, filename: str,
    printed: TextIO | None = None,
) -> dict[str, Any]:
    """Run a one-request child on ``sources`` and return its answer, one reply per source; what
    the child printed goes to ``printed`` (scrubbed) when it answered."""
    if not timeout_s > 0:
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    request = {"kind": "check", "sources": sources, "groups": groups, "timeout_s": timeout_s, "filename": filename}
    # the child's own limits come first; this one is for a child that cannot report
    wall = len(sources) * (timeout_s + scoring_limit(timeout_s)) + 10.0
    # What the check prints (its faulthandler stack of a hang included) is kept, not streamed:
    # a hang answers in one line, and the TUI's screen is no terminal.
    log = io.StringIO()
    child = UserCodeProcess(log=log)
    try:
        answer = child.ask(request, wall)
    finally:
        child.close()
    if answer is not None:
        if printed is not None and log.getvalue():
            printed.write(scrub_text(log.getvalue()))
        return answer
    if child.exit_status is None:
        failure = {"kind": "timeout", "message": f"the reward check did not finish within {wall:g} s; "
                   "a reward function or the file's import is probably stuck in a loop"}
    else:
        failure = _child_failure(child.last_output, filename, timeout_s)
    return {name: {"failure": failure} for name in sources}


_FAULT_FILE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def _child_failure(stderr: str, filename: str, timeout_s: float) -> dict[str, Any]:
    """Explain a child that exited without an answer (faulthandler time-out or a crash)."""
    lines = [m for m in _FAULT_FILE.finditer(stderr) if Path(m["file"]).name == filename]
    lineno = int(lines[0]["line"]) if lines else None
    where = f" ({filename} line {lineno})" if lineno else ""
    if stderr.startswith("Timeout") or "\nTimeout (" in stderr:
        return {
            "kind": "timeout",
            "lineno": lineno,
            "message": f"TimeoutError: {filename} did not finish within the {timeout_s:g} s limit{where}; "
            "is there an endless loop?",
        }
    tail = stderr.strip().splitlines()[-1] if stderr.strip() else "no output"
    return {"kind": "crash", "lineno": lineno, "message": f"the reward check process died{where}: {tail}"}
