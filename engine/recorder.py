"""What every trainer does at a step's end: one recorder for our engine and the TRL attachment.

Steps 5, 7 and 8 of an engine step (docs/architecture.md, "One step") are
the same whichever trainer ran the update, so they live here once; our
engine's loop (``engine.step``) and TRL's GRPOTrainer through
``RlabCallback`` (``engine.integrations.trl``) each hand a :class:`Recorder`
their step and keep no copy of it. A third trainer writes an adapter that
builds :class:`GroupRecord` s and calls :meth:`Recorder.record`.

What the recorder owns:

- the success verdict of every trajectory, by the run's
  :class:`~rlab.engine.rewards.success.SuccessRule` over the verifier's reward
  functions (never the judge's score);
- storing the step: its groups, judge calls and metrics in one transaction,
  so a killed process leaves every step whole or absent;
- reward errors and failed judge calls as events, pausing when asked;
- the alerts (``engine.alerts``): stored as events, printed, pausing on ``pause_on``;
- commands: the :class:`~rlab.store.control.Controller` (pause, single
  step, stop), the check of a pending reward edit on the last groups, and
  the switch to a new reward version (its stored source, a ``reward_edit``
  event, the alerts' reward scale).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rlab.engine.alerts import REWARD_HOLES, AlertThresholds, AlertWatch, GroupStats, reward_scale
from rlab.engine.rewards.edit.gate import CHECK_GROUPS, EditRejected, accept_edit, check_samples
from rlab.engine.rewards.judge.ruler import JudgeResult
from rlab.engine.rewards.scoring_process import RubricVersion
from rlab.engine.rewards.success import SuccessRule
from rlab.store.control import Controller
from rlab.store.records import GroupRecord, TrajectoryRecord
from rlab.store.stepstats import step_stats
from rlab.store.writer import StoreWriter


def say(line: str) -> None:
    """One line for a person watching a headless run (stderr; on a terminal, below the progress line)."""
    print(f"{chr(10) if sys.stderr.isatty() else ''}rlab: {line}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class RunRef:
    """Where a run lives: its file, its row and its name (for the commands a message names)."""

    writer: StoreWriter
    run_id: int
    name: str

    @property
    def db(self) -> str:
        """The run file's path, as a command line names it."""
        return str(self.writer.path)


@dataclass(frozen=True)
class Pauses:
    """What pauses the run besides the alerts' ``pause_on``.

    reward_error: a reward function failed on some trajectory (it scored 0
    meanwhile); judge_failure: a judge call failed after its retries.
    """

    reward_error: bool = True
    judge_failure: bool = False


@dataclass
class StepRecord:
    """One trainer step as the recorder takes it.

    groups: the step's groups (each trajectory's ``reward`` is the trained
    total, ``components`` its reward functions' unweighted values; the
    recorder fills in ``success``). metrics: the trainer's own metrics of
    the step (TRL names); they win over the ones the recorder computes from
    the groups. judged: one judge result per group, in order, or None
    without a judge. reward_errors: reward-function error messages of the
    step (a scored 0 is not a reward). held_out: a held-out evaluation's
    ``(example id, solved)`` pairs, stored as an ``eval`` event so two
    branches' evals pair example by example (``rlab compare --from-step``).
    """

    step: int
    groups: list[GroupRecord]
    metrics: dict[str, float]
    judged: Sequence[JudgeResult] | None = None
    reward_errors: Sequence[str] = ()
    held_out: Sequence[tuple[Any, bool | None]] = ()


class Recorder:
    """The run's bookkeeping at every step's end (see the module doc).

    Args:
        run: the run file's writer, the run's id and name.
        success: what counts as solved.
        weights: the current reward version's verifier functions and
            weights (name -> float); the judge is not among them.
        version: the current reward version (1 = the run's first file).
        thresholds: the alerts' thresholds and ``pause_on``.
        pauses: what else pauses the run.
        poll_interval_s: how often a paused run reads the commands, seconds.
    """

    def __init__(self, run: RunRef, *, success: SuccessRule, weights: Mapping[str, float], version: int = 1,
                 thresholds: AlertThresholds | None = None, pauses: Pauses = Pauses(),
                 poll_interval_s: float = 0.1) -> None:
        self.run = run
        self.success = success
        self.weights = dict(weights)
        self.version = version
        self.pauses = pauses
        self.watch = AlertWatch(thresholds, reward_scale(self.weights))
        self.controller = Controller(run.writer, run.run_id, poll_interval_s=poll_interval_s, tell=say)
        #: the last step's last groups: what a reward edit must score cleanly before it applies
        self.last_groups: list[GroupRecord] = []
        #: the number of the last setting change applied (``rlab set``, a resume's): 0 = as the run started
        self.settings_version = 0
        #: the highest number a change of this run was given (before a resume too): a new change follows it
        self.settings_versions_made = 0
        #: alert kind -> what to do about it, added to the alert's message (a trainer that can rewind says how)
        self.remedies: dict[str, str] = {}
        #: the alert kinds the last recorded step raised (the engine keeps a checkpoint of that step)
        self.alerted: list[str] = []
        #: the trainer keeps a checkpoint at an alert's step that a fork can start from (our engine)
        self.forks = False
        #: steps recorded with a scored trajectory (a step whose every score failed trained nothing)
        self.trained_steps = 0
        self._hacked = False

    @property
    def writer(self) -> StoreWriter:
        """The run file's writer."""
        return self.run.writer

    # -- the step -----------------------------------------------------------------------

    def record(self, record: StepRecord) -> dict[str, float]:
        """Judge success, store the step whole, raise its events and alerts; its metrics.

        Returns the step's stored metrics: those of ``store.stepstats`` over
        the groups, then ``record.metrics`` over them.
        """
        step, groups = record.step, record.groups
        for trajectory in (t for g in groups for t in g.trajectories):
            trajectory.success = self.verdict(trajectory)
        metrics = {**(step_stats(groups) if groups else {}), **record.metrics}
        calls = [result.call_fields() for result in record.judged] if record.judged is not None else None
        group_ids = self.writer.write_step_whole(self.run.run_id, step, groups, metrics, calls)
        # with the store off (a bench of its cost) groups have no ids: the alerts name them by index
        group_ids = group_ids or [g.index for g in groups]
        if groups:
            self.last_groups = groups[-CHECK_GROUPS:]
        if record.held_out:
            ids, passed = zip(*record.held_out)
            self.writer.write_event(self.run.run_id, "eval", {
                "example_ids": list(ids), "passed": [None if p is None else int(p) for p in passed]}, step=step)
        scored = sum(t.reward is not None for g in groups for t in g.trajectories)
        if groups and not self.trained_steps and scored:
            self._first_spread(step, metrics)
        self.trained_steps += scored > 0
        self._reward_errors(step, record.reward_errors, scored)
        self._agent_errors(step, [t.details["agent_error"] for g in groups for t in g.trajectories
                                  if "agent_error" in t.details], sum(len(g.trajectories) for g in groups))
        self._judge_failures(step, group_ids, record.judged or ())
        self._alerts(step, metrics, [GroupStats.of_record(step, gid, g) for gid, g in zip(group_ids, groups)])
        return metrics

    def verdict(self, trajectory: TrajectoryRecord) -> bool | None:
        """Whether ``trajectory`` solved its task by the run's :class:`SuccessRule`.

        The rule reads the verifier's total (the current weights over the
        trajectory's components, without the judge's score); None when its
        scoring errored or the run has no reward function to judge by.
        """
        if trajectory.reward is None or trajectory.details.get("error") or not self.weights:
            return None
        # summed in the rubric's order, as the rubric sums its total (engine.rewards.rubric)
        total = sum(w * trajectory.components.get(name, math.nan) for name, w in self.weights.items())
        return self.success.verdict(total, trajectory.components)

    def add_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        """Merge more metrics into step ``step``'s row (a final evaluation, TRL's logged loss)."""
        self.writer.write_step(self.run.run_id, step, dict(metrics))

    def _first_spread(self, step: int, metrics: Mapping[str, float]) -> None:
        """On the first trained step: when no group has a reward spread, say so with the likely
        causes (GRPO-family advantages are all 0: nothing trains until a group differs)."""
        if metrics.get("frac_reward_zero_std", 0.0) < 1.0:
            return
        clipped = metrics.get("completions/clipped_ratio")
        causes = [f"the token budget (--max-new-tokens cut {clipped:.0%} of the completions)"
                  if clipped else "the token budget (--max-new-tokens)",
                  "the system prompt (does the model know the answer's format?)",
                  f"a reward that never pays, or always pays alike (mean reward {metrics.get('reward', 0.0):.3f})"]
        warning = (f"step {step}: every group's trajectories got the same reward, so every advantage is 0 and "
                   f"nothing trains until a group differs; look at {'; '.join(causes)}")
        self.writer.write_event(self.run.run_id, "warning", {"warning": warning}, step=step)
        say(warning)

    def _reward_errors(self, step: int, errors: Sequence[str], scored: int) -> None:
        """Store a step's reward errors; say them, and that nothing trained when every score
        failed; pause when asked (with the two ways on)."""
        if not errors:
            return
        self.writer.write_event(self.run.run_id, "error", {"reward_errors": len(errors), "first": errors[0]},
                                step=step)
        name, db = self.run.name, self.run.db
        say(f"step {step}: the reward functions failed on {len(errors)} trajectories"
            + (" (every one: nothing was trained)" if not scored else "") + f"; the first: {errors[0]}")
        if self.pauses.reward_error:
            # A version that errs must not train on zeros unseen: stop here and let the
            # user go back (u in the TUI: the previous reward version) or fix it.
            back = {"undo": "press u in the TUI for the previous reward version"} if self.version > 1 else {}
            self.controller.pause(step, "reward function error", first=errors[0], version=self.version, **back)
            say(f"fix the reward file and apply it with `rlab reward {name} FILE --db {db}` (e in the TUI), or go on "
                f"as it is with `rlab resume {name} --db {db}` (space in the TUI; errored trajectories are not "
                "trained on)")

    def _agent_errors(self, step: int, errors: Sequence[str], total: int) -> None:
        """Store and say a step's failed agent rollouts (``engine.agent.trajectory``: scored 0)."""
        if not errors:
            return
        self.writer.write_event(self.run.run_id, "error", {"agent_errors": len(errors), "first": errors[0]}, step=step)
        say(f"step {step}: {len(errors)} of {total} agent rollouts failed (scored 0, counted in agent/errors); "
            f"the first: {errors[0][:300]}")

    def _judge_failures(self, step: int, group_ids: list[int], judged: Sequence[JudgeResult]) -> None:
        failed = [{"group_id": gid, "error": result.error} for gid, result in zip(group_ids, judged) if not result.ok]
        if not failed:
            return
        self.writer.write_event(self.run.run_id, "judge_failed", {"groups": failed}, step=step)
        say(f"step {step}: the judge failed on {len(failed)} of {len(judged)} groups (they keep the verifier's "
            f"reward); the first: {failed[0]['error']}")
        if self.pauses.judge_failure:
            self.controller.pause(step, "judge failed", groups=len(failed))

    def _alerts(self, step: int, metrics: dict[str, float], groups: list[GroupStats]) -> None:
        """Run the watch on this step: store each alert as an event, print it, pause on ``pause_on``."""
        self.alerted = []
        for alert in self.watch.observe(step, metrics, groups):
            self.alerted.append(alert.kind)
            remedy = self._remedy(alert.kind, step)
            if remedy is not None:
                alert = replace(alert, message=f"{alert.message}; {remedy}")
            self.writer.write_event(self.run.run_id, "alert", alert.payload(), step=step)
            say(alert.line())
            if alert.action == "pause":
                self.controller.pause(step, f"alert: {alert.kind}", message=alert.message)
                say(f"look at the groups with `rlab watch --db {self.run.db} {self.run.name}`, then resume with "
                    f"`rlab resume {self.run.name} --db {self.run.db}` (or space in the TUI)"
                    + (f"; or {remedy}" if remedy else ""))

    def _remedy(self, kind: str, step: int) -> str | None:
        """What to do about an alert: for a reward the policy games (``REWARD_HOLES``),
        and for a collapse after one (the policy collapsed onto the hack), a fixed reward,
        not a lower learning rate; for the others the trainer's own advice (``remedies``)."""
        self._hacked = self._hacked or kind in REWARD_HOLES
        if kind not in REWARD_HOLES and not (kind == "collapse" and self._hacked):
            return self.remedies.get(kind)
        name, db = self.run.name, self.run.db
        fix = f"fix the reward: `rlab reward {name} FILE --db {db}` (e in the TUI) applies it from the next step"
        if self.forks:
            fix += (f"; or test the fix against this run on a branch: `rlab fork {name}@{step} --name {name}-fixed "
                    f"--rewards FILE --db {db}` (this step's checkpoint is kept)")
        return fix

    # -- reward versions ---------------------------------------------------------------

    def check_edit(self, step: int, *, filename: str, multi_step: bool = False) -> tuple[int, RubricVersion] | None:
        """The pending ``set_rewards`` command, once it passed the editor's checks on the
        last groups (``engine.rewards.edit.gate``): (command id, the version). A
        rejected edit is resolved with the reason and recorded; the run keeps its version.
        Messages name the file the edit came from (the payload's ``filename``, as ``rlab
        reward FILE`` sends it), else ``filename`` (the run's own copy, which the TUI edits)."""
        assert self.controller.pending_rewards is not None
        command_id, payload = self.controller.pending_rewards
        self.controller.pending_rewards = None
        samples = check_samples(self.last_groups, multi_step=multi_step)
        try:
            return command_id, accept_edit(payload, samples, filename=str(payload.get("filename") or filename),
                                           success=self.success)
        except EditRejected as err:
            self.reject_edit(command_id, step, str(err))
            return None

    def reject_edit(self, command_id: int, step: int, message: str, *, what: str = "reward_edit") -> None:
        """Refuse a reward edit (or, ``what="settings"``, a settings change): the command
        resolved ``rejected``, an ``error`` event (``{what}_rejected``), a line."""
        self.writer.resolve_command(command_id, "rejected", message)
        self.writer.write_event(self.run.run_id, "error", {f"{what}_rejected": message}, step=step)
        say(f"{what.replace('_', ' ')} rejected at step {step}: {message}")

    def switch_rewards(self, step: int, version: int, rubric: RubricVersion, *, from_step: int,
                       command_id: int | None = None, replayed: bool = False, message: str | None = None,
                       **extra: object) -> None:
        """Record reward version ``version`` in force from step ``from_step``.

        Stores its source (a version stored before is left as it is), writes
        a ``reward_edit`` event at ``step`` (``replayed``: a resumed run
        taking again the version a re-run step first ran with), resolves
        ``command_id`` as applied (with ``message``), and judges success and
        scales the hack alert by its weights from now on. ``extra`` joins the
        event's payload.
        """
        sha = self.writer.write_reward_version(self.run.run_id, version, rubric.source, rubric.weights)
        payload = {"version": version, "sha256": sha, "weights": rubric.weights, "from_step": from_step, **extra}
        self.writer.write_event(self.run.run_id, "reward_edit", payload | ({"replayed": True} if replayed else {}),
                                step=step)
        self.version, self.weights = version, dict(rubric.weights)
        self.watch.reward_scale = reward_scale(self.weights)
        if command_id is not None:
            self.writer.resolve_command(command_id, "applied", message)
        say(f"reward version {version} in force from step {from_step}" + (" (replayed)" if replayed else ""))

    # -- settings between steps ---------------------------------------------------------

    def retune(self, thresholds: AlertThresholds) -> None:
        """Judge the next steps by other alert thresholds; the watch keeps its history."""
        self.watch.retune(thresholds)

    def switch_settings(self, step: int, changes: Mapping[str, object], *, command_id: int | None = None,
                        replayed: int | None = None) -> None:
        """Record a settings version in force from step ``step``
        (``engine.run.settings``): a ``settings`` event and the command resolved as
        applied. A new change is numbered after every change the run made
        (``settings_versions_made + 1``); ``replayed``: the number of a change a
        resumed run makes again on a re-run step, which keeps it. The caller
        has applied ``changes`` to its trainer."""
        if replayed is None:
            self.settings_versions_made += 1
        self.settings_version = self.settings_versions_made if replayed is None else replayed
        shown = ", ".join(f"{name}={value}" for name, value in changes.items())
        payload = {"version": self.settings_version, "changes": dict(changes), "from_step": step}
        self.writer.write_event(self.run.run_id, "settings",
                                payload | ({"replayed": True} if replayed is not None else {}), step=step)
        if command_id is not None:
            self.writer.resolve_command(command_id, "applied",
                                        f"settings version {self.settings_version} from step {step}: {shown}")
        say(f"settings version {self.settings_version} in force from step {step}: {shown}"
            + (" (replayed)" if replayed is not None else ""))
