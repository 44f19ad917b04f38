"""The training loop, top to bottom: the engine's one entry point (``rlab run --headless``).

One engine step (docs/architecture.md, "One step"):

1. prompts: P examples drawn (seeded) from the train split;
2. roll out: G trajectories per example (rollout.play);
3. score: the rubric for every trajectory, the judge per group (rewards.scoring);
4. advantages: GRPO-family within each group, GiGPO per turn (train.advantages);
5. store: one transaction per group, commands read between groups;
6. update: clipped policy-gradient steps (train.trainer); vLLM gets the new adapter;
then, every K steps, held-out greedy pass@1 and a checkpoint; then the
commands (pause, single step, stop, reward edits) at the step boundary.
"""

from __future__ import annotations

import json
import math
import sys
import time
import traceback
from pathlib import Path

from rlab.engine.run.config import RunConfig
from rlab.engine.paths import engine_log_path
from rlab.engine.policy.device import clock, peak_memory_metric
from rlab.engine.recorder import StepRecord, say
from rlab.engine.integrations.reporting import Reporter
from rlab.engine.rewards.scoring import score
from rlab.engine.rollout.play import HeldOut
from rlab.engine.run.session import Session, checkpoint, pin_checkpoint
from rlab.engine.run.settings import BETWEEN_STEPS, SettingsError, changed, settings_metrics
from rlab.engine.run.start import start
from rlab.engine.train.advantages import rollout_advantages
from rlab.engine.train.batch import to_batch
from rlab.engine.train.guard import check_finite
from rlab.store.control import Controller
from rlab.store.db import RunFileFullError
from rlab.store.secrets import scrub_text


class Terminated(BaseException):
    """The engine was asked to end (SIGTERM): the run is stopped, as by ``q`` then ``s``.

    A BaseException, as KeyboardInterrupt is, so that no ``except Exception``
    on the way swallows it."""


class RunCrashed(Exception):
    """An error ended a run after it started: its traceback, scrubbed of
    secrets, is in the run's engine log and its ``error`` event. Its text is
    the terminal's one line: the step, the error and where the traceback is."""


def run(config: RunConfig) -> dict:
    """Start (or resume) a run and train it; a crash marks the run ``failed``,
    an interrupt (Ctrl-C, SIGTERM: :class:`Terminated`) ``stopped`` with a
    ``stop`` event.

    Returns the summary of :func:`train`. A ``--report-to`` dashboard whose
    package is missing fails before the run starts (``MissingDashboardError``).
    """
    reporter = Reporter(config.report_to, config.db, config.report_dir)
    session = start(config)
    try:
        reporter.open(session.name, config.model_dump(mode="json"))
        return train(session, reporter)
    except (KeyboardInterrupt, Terminated) as err:
        session.writer.write_event(session.run_id, "stop", {"reason": str(err) or type(err).__name__})
        session.writer.set_status(session.run_id, "stopped")
        err.add_note(f"rlab run --headless --resume {session.name} --db {config.db}")  # how to go on
        raise
    except RunFileFullError as err:
        # nothing more fits in the file (no error event, no status): the line names the file, the fix and the way on
        raise RunFileFullError(f"{err}: rlab run --headless --resume {session.name} --db {config.db}") from err
    except Exception as err:
        log = _keep_traceback(session, err)
        session.writer.set_status(session.run_id, "failed")
        raise RunCrashed(_crash_line(err, session.step, log)) from err
    except BaseException:  # SystemExit and the like: the run is over, and not by our error
        session.writer.set_status(session.run_id, "failed")
        raise
    finally:
        session.close()
        reporter.close()  # last: a dashboard that fails to flush must not keep the store open


def _keep_traceback(session: Session, err: Exception) -> Path:
    """Store ``err``'s traceback, scrubbed of secrets, in the run's ``error``
    event (``error``, ``traceback``, ``step``) and append it to the run's engine
    log (engine.paths.engine_log_path); return the log's path."""
    text = "".join(traceback.format_exception(err))
    # the writer scrubs what it stores; the log is written here, so scrubbed here
    session.writer.write_event(session.run_id, "error", {"error": f"{type(err).__name__}: {err}", "traceback": text},
                               step=session.step)
    text = scrub_text(text)
    log = engine_log_path(Path(session.config.db), session.name)
    with log.open("a", encoding="utf-8") as out:
        out.write(f"rlab: the run failed at step {session.step}:\n{text}")
    return log


def _crash_line(err: Exception, step: int, log: Path) -> str:
    """The terminal's one line for an error that ended a run: the project's own
    error types say their message (a problem a user fixes); any other is ours."""
    own = type(err).__module__.startswith("rlab.")
    what = f"{err}" if own else f"internal error ({type(err).__name__}: {err})"
    return scrub_text(f"the run failed at step {step}: {what}; its traceback is in {log} and the run's error event")


def train(session: Session, reporter: Reporter | None = None) -> dict:
    """Train until max_steps / max_seconds / a stop command; return the summary.

    The summary dict has ``run_id``, ``name``, ``steps``, ``last_step``,
    ``seconds`` (training time), ``eval_pass_at_1_initial``,
    ``eval_pass_at_1_final``, ``status`` and ``eval_curve``:
    ``[[seconds_of_training, pass_at_1], ...]`` for every held-out eval (the
    initial one at 0, the final one last), where seconds of training are wall
    seconds since the first step minus the time spent in held-out evals and
    paused, so the time to a pass@1 target reads from it. An opened ``reporter`` also
    gets every step's metrics (Trackio, TensorBoard: engine.integrations.reporting).
    """
    reporter = reporter or Reporter([], session.config.db)
    recorder = session.recorder
    initial = _evaluate_start(session, reporter)
    clock = _Clock(recorder.controller)
    curve: list[list[float | None]] = [[0.0, _value(initial.pass_at_1)]]
    step = session.first_step
    while not _budget_spent(session.config, step, clock.running()):
        if not _step_boundary(session, step):  # a stop command
            break
        _set_learning_rate(session, step, clock.running())
        session.step = step
        record = train_step(session, step)
        record.metrics |= _schedule_metrics(session)
        evaluated = _held_out_if_due(session, step, record, clock, curve)
        record.metrics |= clock.cycle_metrics(evaluated)
        metrics = recorder.record(record)
        reporter.log(step, metrics)
        _keep_state(session, step)
        _progress(step, metrics, clock.running(), step - session.first_step + 1, clock.logged)
        recorder.controller.end_of_step(step)
        step += 1
    return _finish(session, step - 1, initial, clock.running(), curve, clock.eval_s)


class _Clock:
    """The loop's seconds: of training (``running``: wall time since the first
    step less pauses), of held-out evals among them (``eval_s``, left out of the
    curve's seconds), and when the last progress line went to a log (``logged``)."""

    def __init__(self, controller: Controller) -> None:
        self._start = time.perf_counter()
        self._controller = controller
        self.eval_s = 0.0
        self.logged = [float("-inf")]
        self._cycle_start = self.running()

    def running(self) -> float:
        """Seconds of training so far: wall time less pauses."""
        return time.perf_counter() - self._start - self._controller.paused_seconds

    def cycle_metrics(self, evaluated: float) -> dict[str, float]:
        """``time/cycle``: the step and the loop's own work (store writes, command
        polls, alerts, checkpoints) since the last step's metrics went out, less
        ``evaluated`` seconds of held-out eval (pauses are left out of ``running``);
        ``elapsed_seconds``: seconds of training so far."""
        cycle = self.running() - self._cycle_start - evaluated
        self._cycle_start = self.running()
        return {"time/cycle": cycle, "elapsed_seconds": self.running()}


def _evaluate_start(session: Session, reporter: Reporter) -> HeldOut:
    """The starting policy's held-out eval, recorded as step ``first_step - 1``:
    the watch's best pass@1 starts from it."""
    say(f"held-out evaluation of the starting policy ({len(session.eval_examples)} examples, "
        f"pass@1 = {session.recorder.success.label})")
    before = session.first_step - 1
    session.step = before
    initial = evaluate(session)
    reporter.log(before, session.recorder.record(StepRecord(before, [], initial.metrics(), held_out=initial.outcomes)))
    return initial


def _step_boundary(session: Session, step: int) -> bool:
    """Every chore between steps, before step ``step``: the commands (pause, single
    step, stop), then the reward and setting changes due. False: stop the run.

    Commands at a step boundary are the last step's: a pause here is "paused
    after step - 1", the step the header and the run row show."""
    controller = session.recorder.controller
    controller.poll(step - 1)
    controller.wait_while_paused(step - 1, lambda: _while_paused(session, step))
    if controller.stop:
        return False
    _change_rewards_and_settings(session, step)
    return True


def _change_rewards_and_settings(session: Session, step: int) -> None:
    """The reward and setting changes due at ``step``: after a resume, the replays
    of those its first run made here; then those ``rlab reward`` / ``rlab set``
    sent. A change pins the checkpoint it was made to."""
    recorder = session.recorder
    if session.rewards.replays and session.rewards.replays[0][0] == step:
        replay_reward_edit(session, step)
    versions = recorder.version, recorder.settings_version
    if recorder.controller.pending_rewards is not None:
        apply_reward_edit(session, step)
    if session.settings_replays and session.settings_replays[0].from_step == step:
        replay_settings(session, step)
    _apply_pending_settings(session, step)
    if versions != (recorder.version, recorder.settings_version) and step > session.first_step:
        # the state the change was made to: where a fork tests the run without it
        pin_checkpoint(session, step - 1, "reward_edit" if versions[0] != recorder.version else "settings")


def _set_learning_rate(session: Session, step: int, elapsed_s: float) -> None:
    """The learning rate of step ``step``: linear decay to lr_final_ratio over the
    budget (:func:`budget_fraction`), as TRL's default (linear) schedule does over
    its steps; seconds count as budget too. The warm-up keeps the fresh optimizer's
    first, sign-like Adam steps from knocking the policy off its warm start."""
    cfg = session.config
    used = budget_fraction(cfg, step, elapsed_s)
    warm = min(1.0, step / cfg.lr_warmup_steps) if cfg.lr_warmup_steps else 1.0
    session.parts.trainer.set_lr_scale(warm * (1 - (1 - cfg.lr_final_ratio) * used))


def _schedule_metrics(session: Session) -> dict[str, float]:
    """The learning rate the step trained at, and the settings in force (``engine.run.settings``)."""
    return {"learning_rate": session.parts.trainer.learning_rate,
            **settings_metrics(session.config, session.recorder.settings_version)}


def _held_out_if_due(session: Session, step: int, record: StepRecord, clock: _Clock,
                     curve: list[list[float | None]]) -> float:
    """Every ``eval_every`` steps (``rlab set`` may change it), the held-out eval:
    its metrics and outcomes into ``record``, its pass@1 onto ``curve`` at the
    seconds of training before it. Returns the seconds it took (0: none ran)."""
    if step % session.config.eval_every != 0:
        return 0.0
    t_eval = clock.running()
    held_out = evaluate(session)
    curve.append([round(t_eval - clock.eval_s, 2), _value(held_out.pass_at_1)])
    evaluated = clock.running() - t_eval
    clock.eval_s += evaluated
    record.metrics.update(held_out.metrics())
    record.held_out = held_out.outcomes
    return evaluated


def _keep_state(session: Session, step: int) -> None:
    """The step's checkpoint: pinned when an alert fired (the state it saw: where
    a fork tests its fix), else every ``checkpoint_every`` steps."""
    alerted = session.recorder.alerted
    if alerted:
        pin_checkpoint(session, step, "alert:" + ",".join(alerted))
    elif step % session.config.checkpoint_every == 0:
        checkpoint(session, step)


def train_step(session: Session, step: int) -> StepRecord:
    """Engine step ``step``: roll out, score, advantages, update; the step as the recorder takes it.

    Its metrics are the trainer's (``loss``, ``grad_norm``, ...), the
    judge's, the reward version and error count, and the wall seconds of
    each phase: ``time/generation``, ``time/scoring``, ``time/update``,
    ``time/adapter_sync`` (0 without vLLM) and ``step_seconds``, for
    tests/bench/backends.py; the clock waits for the device's queued kernels
    at each phase's end. The recorder adds those computed from the groups
    (``reward``, ``success_rate``, lengths: ``store.stepstats``).
    """
    parts, cfg = session.parts, session.config
    device = parts.policy.device
    t0 = clock(device)
    examples = session.rng.sample(session.train_examples, cfg.prompts_per_step)
    rollouts = parts.rollout.play(examples)
    t_played = clock(device)
    scored = score(rollouts, session.rewards.rubric, parts.judge, cfg.judge.weight if cfg.judge else 1.0)
    t_scored = clock(device)
    advantages = rollout_advantages(rollouts, scored.rewards, skip=scored.judge_failed | scored.errored_groups,
                                    method=cfg.advantage, turn_rewards=scored.turn_rewards, gamma=cfg.gamma,
                                    omega=cfg.omega, mode=cfg.gigpo_mode)
    batch = to_batch(rollouts, scored, advantages, session.recorder.version, per_turn=cfg.train_unit == "turn")
    t_update = clock(device)
    update = parts.trainer.step(batch.samples)
    batch.keep_policy_logprobs()
    check_finite(parts.policy.model, step, f"--lr ({cfg.lr}), --beta ({cfg.beta}) or --lora-alpha ({cfg.lora_alpha})")
    t_sync = clock(device)
    if parts.vllm is not None:
        parts.vllm.sync_policy(parts.policy.model, step, session.files / "adapters")
    t_synced = clock(device)
    seconds = clock(device) - t0
    metrics = {"step_seconds": seconds, "step_time": seconds,  # TRL's name for the same wall-clock seconds
               "reward_errors": len(scored.errors), "reward_version": session.recorder.version,
               **update, **peak_memory_metric(device), **batch.metrics, **parts.rollout.metrics,
               "time/generation": t_played - t0, "time/scoring": t_scored - t_played,
               "time/update": t_sync - t_update, "time/adapter_sync": t_synced - t_sync}
    judged = scored.judged.results if scored.judged is not None else None
    return StepRecord(step, batch.groups, metrics, judged, scored.errors)


def evaluate(session: Session) -> HeldOut:
    """Held-out greedy evaluation: pass@1 by the run's success rule (nan when a
    score errored: pass@1 is never computed from errored scores), the mean
    reward and each reward function's mean; of the trained weights, not an int8
    sampling copy (``Policy.exact_sampling``)."""
    with session.parts.policy.exact_sampling():
        return session.parts.rollout.evaluate(session.eval_examples, session.rewards.rubric,
                                              session.recorder.success)


def _value(pass_at_1: float) -> float | None:
    """pass@1 as the summary and curve hold it: None for no verdict (nan)."""
    return None if math.isnan(pass_at_1) else pass_at_1


def apply_reward_edit(session: Session, step: int) -> None:
    """Apply a pending ``set_rewards`` at this step boundary, or reject it with the reason.

    The edit passes the reward editor's checks first, on the last step's
    groups (``Recorder.check_edit``); a rejected edit leaves the run on its
    current version and never fails it.
    """
    recorder = session.recorder
    checked = recorder.check_edit(step, filename=session.rewards.file.name, multi_step=session.scenario.multi_step)
    if checked is None:
        return
    command_id, rubric = checked
    session.rewards.use(rubric)
    recorder.switch_rewards(step, recorder.version + 1, rubric, from_step=step, command_id=command_id)


def replay_reward_edit(session: Session, step: int) -> None:
    """After a resume: switch to the reward version this step first ran with
    (``RunRewards.replays``), recorded as a replayed ``reward_edit``."""
    _, version, rubric = session.rewards.replays.pop(0)
    session.rewards.use(rubric)
    session.recorder.switch_rewards(step, version, rubric, from_step=step, replayed=True)


def _while_paused(session: Session, step: int) -> None:
    """A paused run's beat before step ``step``: its heartbeat, and setting changes at once
    (``rlab set`` on a paused run answers, and the change holds when the run resumes)."""
    session.writer.heartbeat(session.run_id, step - 1)
    _apply_pending_settings(session, step)


def _apply_pending_settings(session: Session, step: int) -> None:
    pending = session.recorder.controller.pending_settings
    while pending:
        apply_settings(session, step, *pending.pop(0))


def apply_settings(session: Session, step: int, command_id: int, payload: dict) -> None:
    """Apply a pending ``set_settings`` (``rlab set``) at this step boundary, or reject it
    with the reason; checked again here (``engine.run.settings``), since the run may have
    changed since ``rlab set`` checked it. A rejected change leaves every setting as it was."""
    try:
        config, changes = changed(session.config, payload.get("changes") or {}, BETWEEN_STEPS,
                                  refusal=f"rlab set changes only: {', '.join(BETWEEN_STEPS)}")
        session.use_settings(config)
    except SettingsError as err:
        session.recorder.reject_edit(command_id, step, str(err), what="settings")
        return
    session.recorder.switch_settings(step, changes, command_id=command_id)


def replay_settings(session: Session, step: int) -> None:
    """After a resume: make again the setting change this step was first made for
    (``Session.settings_replays``), recorded as a replayed ``settings`` event."""
    change = session.settings_replays.pop(0)
    config, _ = changed(session.config, change.changes, None, refusal="")
    session.use_settings(config)
    session.recorder.switch_settings(step, change.changes, replayed=change.version)


def _budget_spent(config: RunConfig, step: int, elapsed_s: float) -> bool:
    if config.max_steps is not None and step > config.max_steps:
        return True
    return config.max_seconds is not None and elapsed_s >= config.max_seconds


def budget_fraction(config: RunConfig, step: int, elapsed_s: float) -> float:
    """How far the learning-rate decay has run, in [0, 1]: over the budget
    (max_steps and/or max_seconds) or over ``lr_decay_steps``, whichever ends
    first, then held. So an open-ended run (the TUI's default one) anneals
    too, and a long budget does not keep the peak rate for minutes: on the
    tiny policy the peak rate's noise holds held-out pass@1 near 0.8-0.85
    until the rate comes down.
    """
    parts = [(step - 1) / config.lr_decay_steps]
    if config.max_steps:
        parts.append((step - 1) / config.max_steps)
    if config.max_seconds:
        parts.append(elapsed_s / config.max_seconds)
    return min(max(parts), 1.0)


#: In a log (not a terminal), a progress line at most this often (seconds), and on every held-out eval.
LOG_EVERY_S = 10.0


def _progress(step: int, metrics: dict[str, float], elapsed: float, done: int,
              last_logged: list[float] | None = None) -> None:
    """The progress line; ``done`` steps ran in ``elapsed`` seconds (after a
    resume, counted from the first resumed step, not from step 1). On a
    terminal it is rewritten in place; in a log (the TUI's engine log, a
    file, a pipe) it is a whole line, at most every :data:`LOG_EVERY_S`
    seconds of ``elapsed`` (``last_logged`` holds the last one's) and on
    every step with a held-out eval, so a log reads line by line."""
    reward = metrics.get("reward")  # none when every score of the step errored
    shown = f"step {step:5d}  reward {'n/a' if reward is None else f'{reward:.3f}'}  "
    if "success_rate" in metrics:
        shown += f"success {metrics['success_rate']:.3f}  "
    if "eval/pass_at_1" in metrics:
        shown += f"pass@1 {metrics['eval/pass_at_1']:.3f}  "
    shown += f"{done / max(elapsed, 1e-9):.2f} steps/s"
    if sys.stderr.isatty():
        print("\r" + shown, end="", file=sys.stderr, flush=True)
        return
    last_logged = last_logged if last_logged is not None else [float("-inf")]
    if "eval/pass_at_1" in metrics or elapsed - last_logged[0] >= LOG_EVERY_S:
        last_logged[0] = elapsed
        print(shown, file=sys.stderr, flush=True)


def _finish(session: Session, last: int, initial: HeldOut, seconds: float,
            curve: list[list[float | None]], eval_s: float) -> dict:
    """Final held-out eval, last checkpoint, status; the summary."""
    held_out = evaluate(session)
    final = _value(held_out.pass_at_1)
    if last >= session.first_step and last % session.config.eval_every != 0:
        curve.append([round(seconds - eval_s, 2), final])
    session.recorder.add_metrics(last, held_out.metrics())
    if last >= session.first_step and last % session.config.checkpoint_every != 0:
        checkpoint(session, last)
    status = "stopped" if session.recorder.controller.stop else "finished"
    ran = last - session.first_step + 1
    if ran > 0 and session.recorder.trained_steps == 0:
        # every score of every step failed: the run trained nothing, and must not read as done
        status = "failed"
        session.writer.write_event(session.run_id, "error", {
            "error": f"every reward score of all {ran} steps failed: nothing was trained (see the steps' error "
                     "events; `rlab reward` applies a fixed reward file to a live run)"}, step=last)
        say(f"every reward score of all {ran} steps failed: nothing was trained; the run ends failed")
    session.writer.set_status(session.run_id, status)
    if sys.stderr.isatty():  # end the rewritten progress line
        print(file=sys.stderr)
    return {"run_id": session.run_id, "name": session.name, "steps": last - session.first_step + 1,
            "last_step": last, "seconds": round(seconds, 2), "eval_pass_at_1_initial": _value(initial.pass_at_1),
            "eval_pass_at_1_final": final, "status": status, "eval_curve": curve}


def summary_line(summary: dict) -> str:
    """The one JSON line ``rlab run --headless`` ends with."""
    return json.dumps(summary)
