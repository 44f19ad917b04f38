"""The lab attached to a TRL GRPOTrainer run, on one process or many.

    from trl import GRPOTrainer
    from rlab.engine.integrations.trl import RlabCallback

    trainer = GRPOTrainer(model=..., reward_funcs=[...], args=config, train_dataset=...)
    trainer.add_callback(RlabCallback("runs.db", trainer=trainer))   # the one line
    trainer.train()

Start it as usual (``python train.py``, ``accelerate launch train.py``,
``torchrun --nproc_per_node N train.py``; DeepSpeed, FSDP and TRL's vLLM
modes change nothing here), then, from another terminal on the machine that
runs process 0 (or over ssh to it):

- ``rlab watch --db runs.db`` shows the run live: groups, each reward
  function's value, advantages, TRL's own metrics, alerts;
- ``rlab pause|resume|step RUN --db runs.db`` (``space`` / ``n`` in the TUI)
  pause every process after the current optimizer step, resume, or let
  exactly one more step run;
- ``rlab reward RUN rewards.py --db runs.db`` (``e`` in the TUI) checks a new
  reward file in a separate process on the last stored groups (a dry run
  next to the applied version), then every process switches to it at the
  same step; the versions are stored as for the lab's own runs;
- ``rlab set RUN lr=3e-5 --db runs.db`` (``o`` in the TUI) moves the
  schedule's peak (``beta`` too, between values above 0) on every process
  at the same step end; what TRL fixes at its start (temperature, ...) is
  refused with the reason (``engine.integrations.trl_settings.TRL_REFUSED``);
- the alerts (length drift, collapse, no signal, hack, ...) run on every
  stored step, are stored as events, and pause the run on ``pause_on``;
- ``judge=JudgeSettings(...)`` adds a RULER judge as one more reward
  function (:mod:`rlab.engine.integrations.trl_judge`); its calls are stored.

How the processes agree (:mod:`rlab.engine.integrations.trl_ranks`). Only
the main process (global rank 0) opens the run file. At every optimizer
step's end (``on_step_end``, which every process runs) the main process
stores the step's completions (TRL's own gathered log of the generation
batch, ``trainer._logs``, once per generation: every trajectory once, from
every process), runs the alerts, reads the commands, checks a reward edit,
and broadcasts its decision over the trainer's own process group
(accelerate's ``broadcast_object_list``); every process applies it. While
the run is paused the main process re-broadcasts "still paused" every
``beat_s`` seconds, so the other processes wait in short collectives (well
inside NCCL's and gloo's time-outs) and none runs ahead. A reward edit is
loaded by every process's scoring process and the answers gathered: the
version switches on all processes, or on none (the command is rejected with
the failing process's error).

The reward functions (:mod:`rlab.engine.integrations.trl_rewards`): the
callback puts slots of ours in ``trainer.reward_funcs``. Version 1 calls
the script's own functions exactly as TRL does (in the trainer's processes);
edited versions are scored in the lab's scoring process on each process,
under the rubric's contract (a failing function gives 0, never an
exception). Version 1 is stored as a reward file (``rlab_rewards.py`` in
``output_dir``: the functions and what they use from their module), so the
TUI's editor opens it; when the functions cannot be written out (lambdas,
closures) the run still takes edits, and the dry run compares with the
stored rewards.

What a step's end does (store the step whole, judge success, raise the
events and alerts, check and switch reward versions) is the lab's one
recorder (``engine.recorder``), the same our own engine calls; this module
only turns TRL's batch into the recorder's records and carries the
decisions across processes.

Where the attachment reads TRL's private state (checked against TRL 1.16.0),
because TRL offers no public way:

- ``trainer._logs``: GRPOTrainer's gathered log of each generation batch
  (prompts, completions, each reward function's values, advantages). TRL
  hands it only to its own completion tables (``log_completions``: W&B,
  Trackio, parquet) on logging steps, never to a callback.
- ``trainer._metrics["train"]``: the values TRL averages into its next
  ``on_log``. A callback's ``on_log`` sees them only every ``logging_steps``,
  averaged; the recorder needs each optimizer step's own, at its end.

Everything else is public: the ``TrainerCallback`` hooks, the trainer's
``reward_funcs`` / ``reward_weights`` / ``reward_func_names`` and
``accelerator``.

The run is ``finished`` at the end of training (``stopped`` after a ``stop``
command); if a process dies (``kill -9``, an exception), ``on_train_end`` is
not reached, every write so far is whole (one transaction per step), and
the next open of the file marks the run ``crashed`` once process 0 is gone.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from rlab.engine.alerts import AlertThresholds
from rlab.engine.run.config import JudgeSettings
from rlab.engine.integrations.trl_judge import JUDGE_NAME, JudgedBatch, JudgeReward
from rlab.engine.integrations.trl_ranks import Ranks
from rlab.engine.integrations.trl_rewards import FixedReward, GenerationRows, TrlRewards, functions_source
from rlab.engine.integrations.trl_settings import apply_settings, current_settings, lambda_scheduler, trl_changes
from rlab.engine.recorder import Pauses, Recorder, RunRef, StepRecord, say
from rlab.engine.rewards.edit.check import validate
from rlab.engine.rewards.edit.gate import check_samples
from rlab.engine.rewards.scoring_process import RubricVersion
from rlab.engine.run.settings import SettingsError
from rlab.engine.rewards.success import SuccessError, SuccessRule
from rlab.store.formats.trl import NAME, logged_table, rows_to_step, split_groups
from rlab.store.formats.write import free_name
from rlab.store.records import DEFAULT_SUCCESS_THRESHOLD, GroupRecord
from rlab.store.writer import StoreWriter

#: Version 1's reward file, written into the trainer's output_dir.
VERSION_ONE_FILE = "rlab_rewards.py"


class RlabCallback(TrainerCallback):
    """A ``transformers.TrainerCallback`` attaching the lab to a GRPOTrainer (see the module doc).

    Build it on every process (the script runs on every process), before
    ``trainer.train()``.

    Args:
        db: the SQLite run file (created if missing); only process 0 opens it.
        trainer: the GRPOTrainer.
        name: the run name (default ``{output_dir name}-trl``, made unique).
        rewards: a reward file (the lab's format: functions and ``WEIGHTS``)
            to score with from the start, in place of the functions given to
            GRPOTrainer; it is version 1.
        edits: put the lab's reward slots into the trainer (needed for reward
            edits, the judge and per-process rows); False only writes the run file.
        success: the reward function whose value says a completion solved its
            task (``success_rate``, and the hack / collapse alerts); None: the
            total of the reward functions against ``success_threshold``, as the
            lab's own runs judge a task that declares none (``engine.rewards.success``).
        success_threshold: the value of ``success`` that counts as solved.

    Raises:
        rlab.engine.rewards.success.SuccessError: ``success`` is none of the run's reward functions.
        alerts: thresholds and ``pause_on`` (``engine.alerts.AlertThresholds``
            or a dict of them).
        judge: a RULER judge to add as one more reward function (its TRL
            weight: ``judge.weight``).
        judge_rubric: the judge's grading text (None: RULER's default).
        pause_on_reward_error: pause when an edited version's function fails
            on some completion (they get 0 meanwhile), as the lab's runs do.
        poll_interval_s: how often the paused main process reads commands.
        beat_s: how long the other processes wait in one collective while paused.
    """

    def __init__(self, db: str | Path, *, trainer: Any, name: str | None = None,
                 rewards: str | Path | None = None, edits: bool = True, success: str | None = None,
                 success_threshold: float = DEFAULT_SUCCESS_THRESHOLD,
                 alerts: AlertThresholds | dict | None = None, judge: JudgeSettings | None = None,
                 judge_rubric: str | None = None, pause_on_reward_error: bool = True,
                 poll_interval_s: float = 0.2, beat_s: float = 1.0) -> None:
        self.db = Path(db)
        self.trainer = trainer
        self.name = name
        self.ranks = Ranks(getattr(trainer, "accelerator", None))
        self.success = SuccessRule(success, success_threshold)
        self.thresholds = alerts if isinstance(alerts, AlertThresholds) else AlertThresholds.model_validate(
            alerts or {})
        self.pause_on_reward_error = pause_on_reward_error
        self.poll_interval_s = poll_interval_s
        self.beat_s = beat_s
        self.rewards: TrlRewards | None = None
        self.reward_path: Path | None = Path(rewards) if rewards is not None else None
        self.judge_settings = judge
        self.judge: JudgeReward | None = None
        if edits or judge is not None or rewards is not None:
            self.rewards = TrlRewards(trainer, self.ranks)
            if self.reward_path is not None:
                self.rewards.switch(1, _file_version(self.reward_path))
            names = self.rewards.version.weights
            if success is not None and success not in names:
                raise SuccessError(f"RlabCallback(success={success!r}) names no reward function of this run (its "
                                   f"functions: {', '.join(names) or 'none'}); pass success= one of them, or None "
                                   "to judge by the total reward")
            if judge is not None:
                self.judge = JudgeReward(judge, self.ranks, rubric=judge_rubric,
                                         group_size=getattr(trainer, "num_generations", None))
                self.rewards.add_fixed(FixedReward(JUDGE_NAME, self.judge, judge.weight))
        # main process only
        self.recorder: Recorder | None = None
        self.last_step = -1
        self.stopped = False
        self._seen: dict[str, int] = {}
        self._stored_keys: set[str] = set()
        self._last_rows: str | None = None

    # -- start and end ------------------------------------------------------------

    def on_train_begin(self, args, state, control, **kwargs):
        if not self.ranks.is_main:
            return
        writer = StoreWriter(self.db)
        name = self.name or free_name(writer, f"{Path(args.output_dir).name}-{NAME}")
        reward_file, source, why = self._version_one(args)
        config = {k: v for k, v in args.to_dict().items()
                  if isinstance(v, (int, float, str, bool)) and "token" not in k}
        config.update({"alerts_by": "engine", "alerts": self.thresholds.model_dump(),
                       "processes": self.ranks.count, "success": self.success.function,
                       "success_threshold": self.success.threshold})
        if reward_file is not None:
            config["reward_file"] = str(reward_file)
        if self.judge_settings is not None:
            config["judge"] = self.judge_settings.model_dump()
        run_id = writer.start_run(
            name, NAME, config, {"format": NAME, "output_dir": str(args.output_dir),
                                 "source": "rlab.engine.integrations.trl"},
            reward_file=reward_file)
        self.name = name
        weights = self.rewards.version.weights if self.rewards is not None else {}
        if source is not None:
            writer.write_reward_version(run_id, 1, source, weights)
        elif self.rewards is not None:
            writer.write_event(run_id, "warning", {"message": why})
            say(why)
        pauses = Pauses(reward_error=self.pause_on_reward_error,
                        judge_failure=self.judge_settings is not None and self.judge_settings.on_failure == "pause")
        self.recorder = Recorder(RunRef(writer, run_id, name), success=self.success, weights=weights,
                                 thresholds=self.thresholds, pauses=pauses, poll_interval_s=self.poll_interval_s)
        say(f"run {name!r} in {self.db} ({self.ranks.count} process{'es' * (self.ranks.count != 1)}): "
            f"rlab watch --db {self.db}")

    @property
    def run_id(self) -> int | None:
        """The run's row in the run file (main process, once training began)."""
        return self.recorder.run.run_id if self.recorder is not None else None

    def _version_one(self, args) -> tuple[Path | None, str | None, str]:
        """Version 1 as a reward file: (its path, its source, "") or (None, None, why not)."""
        if self.rewards is None:
            return None, None, ""
        if self.reward_path is not None:
            return self.reward_path.resolve(), self.reward_path.read_text(encoding="utf-8"), ""
        version = self.rewards.version
        if not version.weights:
            return None, None, "no reward function to edit (only reward models)"
        header = (f"# Version 1 of the rewards of this TRL run: the reward functions given to GRPOTrainer,\n"
                  f"# with what they use from their module. Edit it and apply it with\n"
                  f"# `rlab reward RUN {VERSION_ONE_FILE}` or `e` in `rlab watch`.")
        source, why = functions_source(version.functions or {}, version.weights, header)
        if source is None:
            return None, None, f"version 1 is not stored as a reward file ({why}); edits still apply"
        result = validate(source, [], [], filename=VERSION_ONE_FILE)
        if not result.ok or set(result.weights) != set(version.weights):
            problem = result.message if not result.ok else f"it defines reward functions {sorted(result.weights)}"
            return None, None, (f"version 1 is not stored as a reward file (the functions written out "
                                f"do not load alone: {problem}); edits still apply")
        path = Path(args.output_dir) / VERSION_ONE_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source, encoding="utf-8")
        return path.resolve(), source, ""

    def on_train_end(self, args, state, control, **kwargs):
        if self.rewards is not None:
            self.rewards.close()
        if self.judge is not None:
            self.judge.close()
        if self.recorder is None:
            return
        self.recorder.writer.set_status(self.recorder.run.run_id, "stopped" if self.stopped else "finished")
        self.recorder.writer.close()
        self.recorder = None

    # -- every optimizer step ---------------------------------------------------------

    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step
        if self.ranks.is_main and self.recorder is not None:
            self._store(args, step)
            self.recorder.controller.end_of_step(step)
        while True:
            decision = self._decide(step) if self.ranks.is_main and self.recorder is not None else None
            decision = self.ranks.broadcast(decision) or {"paused": False, "stop": False, "edit": None,
                                                          "settings": []}
            if decision["edit"] is not None:
                self._switch(decision["edit"], step)
            for command_id, changes in decision["settings"]:
                apply_settings(self.trainer, changes)
                if self.recorder is not None:
                    self.recorder.switch_settings(step + 1, changes, command_id=command_id)
            if decision["stop"]:
                self.stopped = True
                control.should_training_stop = True
                return control
            if not decision["paused"]:
                return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.recorder is None or not logs or any(k.startswith("eval_") for k in logs):
            return
        self._seen = {}  # TRL clears its train metrics right after this call
        if "train_runtime" in logs:  # the end-of-training summary
            return
        metrics = {k: float(v) for k, v in logs.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
        if state.global_step == self.last_step:
            metrics = {k: v for k, v in metrics.items() if k not in self._stored_keys}
        if metrics:
            self.recorder.add_metrics(state.global_step, metrics)

    # -- main process: the step into the run file -----------------------------------------

    def _trl_metrics(self) -> dict[str, float]:
        """The step's TRL metrics (what TRL will log), from the values it gathered since the last step."""
        out: dict[str, float] = {}
        lists = (getattr(self.trainer, "_metrics", None) or {}).get("train") or {}
        for key, values in lists.items():
            seen = self._seen.get(key, 0)
            new = [float(v) for v in list(values)[seen:]
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
            self._seen[key] = len(values)
            if new:
                out[key] = sum(new) / len(new)
        return out

    def _store(self, args, step: int) -> None:
        """Hand the newest generation batch (once) and TRL's step metrics to the recorder."""
        assert self.recorder is not None
        generation: GenerationRows | None = None
        if self.rewards is not None:
            generation, self.rewards.pending = self.rewards.pending, None
            if generation is None:
                return  # no new generation since the last stored one (num_iterations > 1)
        columns, rows = logged_table(getattr(self.trainer, "_logs", {}) or {})
        if generation is not None:
            rows = rows[-len(generation.rows):]
        if not rows:
            return
        if generation is None:  # edits=False: tell a new batch from the last by its content
            fingerprint = repr(rows)
            if fingerprint == self._last_rows:
                return
            self._last_rows = fingerprint
        metrics = self._trl_metrics()
        imported = rows_to_step(Path(args.output_dir), step, columns, rows, {step: metrics})
        groups = split_groups(imported.groups, getattr(self.trainer, "num_generations", None))
        if getattr(self.trainer, "tools", None):  # GRPOTrainer(tools=...): a completion without a call made none
            for trajectory in (t for g in groups for t in g.trajectories):
                trajectory.tool_calls = trajectory.tool_calls or []
        errors = self._annotate(groups, generation)
        if self.rewards is not None:
            metrics["reward_version"] = float(self.rewards.version.number)
        lr, beta = current_settings(self.trainer)
        metrics.update({"settings/lr": lr, "settings/beta": beta,
                        "settings/version": float(self.recorder.settings_version)})
        judged = self._judged(generation)
        stored = self.recorder.record(StepRecord(step, groups, metrics, judged.results if judged else None, errors))
        self.last_step, self._stored_keys = step, set(stored)

    def _annotate(self, groups: list[GroupRecord], generation: GenerationRows | None) -> list[str]:
        """Put what the reward slots gathered (example, version, process, error), the weighted
        reward and the judge's verdict on the records; return the scoring errors."""
        meta = generation.rows if generation is not None else None
        weights = generation.weights if generation is not None else {}
        flat = [t for g in groups for t in g.trajectories]
        if meta is not None and len(meta) != len(flat):
            meta = None
        judged = self._judged(generation)
        errors: list[str] = []
        row = 0
        for group in groups:
            for t in group.trajectories:
                if weights:  # TRL's total: the weighted sum of the finite components
                    t.reward = float(sum(weights.get(n, 1.0) * v for n, v in t.components.items()))
                if meta is not None:
                    m = meta[row]
                    t.reward_version = m["version"]
                    t.details = {**t.details, "rank": m["rank"]}
                    if m["error"]:
                        t.details["error"] = m["error"]
                        errors.append(m["error"])
                    if t.index == 0:
                        group.example = m["example"]
                if judged is not None and (found := judged.at(row)) is not None:
                    result, k = found
                    if result.scores is not None:
                        t.judge_score = result.scores[k]
                        t.judge_explanation = result.explanations[k] if k < len(result.explanations) else None
                        ranks = result.ranks
                        t.judge_rank = ranks[k] if ranks is not None else None
                    group.judge_status, group.judge_error = result.status, result.error
                row += 1
        return errors

    def _judged(self, generation: GenerationRows | None) -> JudgedBatch | None:
        """The judge's verdict on ``generation``, when it is that batch's."""
        last = self.judge.last if self.judge is not None else None
        if last is None or generation is None or last.keys != [r["key"] for r in generation.rows]:
            return None
        return last

    # -- commands: decided on the main process, applied on every process ------------------

    def _decide(self, step: int) -> dict[str, Any]:
        """Read the commands; while paused, wait up to ``beat_s``; check a pending edit."""
        assert self.recorder is not None
        c = self.recorder.controller
        c.poll(step)
        if c.paused and not c.stop and c.pending_rewards is None:
            deadline = time.monotonic() + self.beat_s
            while time.monotonic() < deadline and c.paused and not c.stop and c.pending_rewards is None:
                time.sleep(self.poll_interval_s)
                c.poll(step)
            self.recorder.writer.heartbeat(self.recorder.run.run_id, step)
        edit = self._check_edit(step) if c.pending_rewards is not None else None
        return {"paused": c.paused and not c.stop, "stop": c.stop, "edit": edit,
                "settings": self._check_settings(step)}

    def _check_settings(self, step: int) -> list[tuple[int, dict[str, Any]]]:
        """The pending ``rlab set`` commands this run can apply (``engine.integrations.trl_settings.trl_changes``),
        as (command id, changes); the others are rejected with the reason."""
        assert self.recorder is not None
        accepted = []
        lr, beta = current_settings(self.trainer)
        while self.recorder.controller.pending_settings:
            command_id, payload = self.recorder.controller.pending_settings.pop(0)
            try:
                changes = trl_changes(payload.get("changes") or {}, lr=lr, beta=beta)
                if "lr" in changes:
                    lambda_scheduler(self.trainer)
            except (SettingsError, ValueError) as err:
                self.recorder.reject_edit(command_id, step, str(err), what="settings")
                continue
            lr, beta = changes.get("lr", lr), changes.get("beta", beta)
            accepted.append((command_id, changes))
        return accepted

    def _check_edit(self, step: int) -> dict[str, Any] | None:
        """The pending set_rewards, once it passed the lab's gate (checked in a separate
        process on the last stored groups); None (and the command rejected) otherwise."""
        assert self.recorder is not None and self.recorder.controller.pending_rewards is not None
        if self.rewards is None:
            command_id, _ = self.recorder.controller.pending_rewards
            self.recorder.controller.pending_rewards = None
            self.recorder.reject_edit(command_id, step, "this TRL run was attached with edits=False; reward "
                                                        "edits need the lab's reward slots")
            return None
        filename = self.reward_path.name if self.reward_path is not None else VERSION_ONE_FILE
        checked = self.recorder.check_edit(step, filename=filename)
        if checked is None:
            return None
        command_id, version = checked
        return {"command_id": command_id, "version": self.rewards.version.number + 1, "source": version.source,
                "weights": version.weights, "filename": version.filename,
                "probe": check_samples(self.recorder.last_groups[:1], multi_step=False)[:1]}

    def _switch(self, edit: dict[str, Any], step: int) -> None:
        """Every process: load the checked version in its scoring process; switch only if all did."""
        assert self.rewards is not None
        rubric = RubricVersion(edit["source"], dict(edit["weights"]), edit["filename"])
        try:
            error = self.rewards.probe(rubric, edit["probe"])
        except Exception as exc:  # noqa: BLE001 - any failure here is this process's answer
            error = f"{type(exc).__name__}: {exc}"
        answers = self.ranks.gather([{"rank": self.ranks.index, "error": error}])
        failed = [a for a in answers if a["error"]]
        if not failed:
            self.rewards.switch(edit["version"], rubric)
        if not self.ranks.is_main:
            return
        assert self.recorder is not None
        if failed:
            self.recorder.reject_edit(edit["command_id"], step, f"reward version did not load on process "
                                                                f"{failed[0]['rank']}: {failed[0]['error']}")
            return
        version = edit["version"]
        self.recorder.switch_rewards(
            step, version, rubric, from_step=step + 1, command_id=edit["command_id"],
            message=f"reward version {version} on {len(answers)} processes from step {step + 1}",
            processes={str(a["rank"]): version for a in answers})


def _file_version(path: Path) -> RubricVersion:
    """A reward file as version 1, once it loaded in a check process (never in this one).

    Raises:
        ValueError: the file does not load (the message says where).
    """
    source = path.read_text(encoding="utf-8")
    result = validate(source, [], [], filename=path.name)
    if not result.ok:
        raise ValueError(f"{path}: {result.message}")
    return RubricVersion(source, result.weights, path.name)
