"""``rlab set`` on a TRL run: the learning rate's peak and the KL weight, applied on every process.

What a TRL run takes between steps is :data:`TRL_BETWEEN_STEPS`, those every
process can apply at one step without rebuilding the trainer;
:data:`TRL_REFUSED` says why not the others. :data:`SETTINGS` declares them
to ``rlab set`` (entry point ``rlab.trainers``: ``trl``). The attachment
decides on the main process which changes a TRL run takes (:func:`trl_changes`)
and broadcasts them; at the same step end every process calls
:func:`apply_settings` on its own trainer, so all ranks train the next step
with the same values.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from rlab.engine.run.config import RunConfig
from rlab.engine.run.settings import SettingsError, TrainerSettings, changed, settings_plan

#: What ``rlab set`` changes on a TRL run, applied on every process at one step end.
TRL_BETWEEN_STEPS: dict[str, str] = {
    "lr": "the peak of the trainer's schedule: the scheduler's base rates and the optimizer's current ones",
    "beta": "the KL weight TRL reads at every loss, between two values above 0 (TRL builds its reference model "
            "only when beta is not 0 at the start)",
}

#: Why a TRL run refuses the engine's other between-step settings (TRL 1.16).
TRL_REFUSED: dict[str, str] = {
    "temperature": "GRPOTrainer bakes it into the loss's log-probability head when it starts "
                   "(trl.trainer.utils.add_fused_lm_head): a change would sample at one temperature and train at "
                   "another; set GRPOConfig(temperature=...) and restart",
    "max_new_tokens": "GRPOTrainer builds its generation config (and vLLM's sampling) once: "
                      "set GRPOConfig(max_completion_length=...) and restart",
    "prompts_per_step": "the batch size is fixed by the dataloader and accelerate's sharding at the start",
    "eval_every": "TRL's own eval_steps schedules evaluation; the lab runs no held-out eval in a TRL run",
    "alerts": "set them when attaching: RlabCallback(..., alerts={...})",
}


def trl_changes(given: Mapping[str, Any], *, lr: float, beta: float) -> dict[str, Any]:
    """The changes ``given`` makes to a TRL run whose schedule peaks at ``lr`` and
    whose KL weight is ``beta`` (:data:`TRL_BETWEEN_STEPS`), checked by RunConfig.

    Raises:
        SettingsError: a setting a TRL run refuses (:data:`TRL_REFUSED`, with the
            reason), a bad value, or a beta to or from 0.
    """
    for name in given:
        if name in TRL_REFUSED:
            raise SettingsError(f"{name} cannot change on a TRL run: {TRL_REFUSED[name]}")
    base = RunConfig(lr=lr, beta=beta)
    _, changes = changed(base, given, TRL_BETWEEN_STEPS, as_flags=False,
                         refusal=f"rlab set changes a TRL run's {', '.join(TRL_BETWEEN_STEPS)}")
    if "beta" in changes and (changes["beta"] == 0) != (base.beta == 0):
        raise SettingsError(f"beta={changes['beta']:g}: {TRL_BETWEEN_STEPS['beta']}")
    return changes


def _stored_run_changes(run: Mapping[str, Any], events: Iterable[Mapping[str, Any]],
                        given: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`trl_changes` against a stored live TRL run: its GRPOConfig values, every change so far in force."""
    now = {"lr": run["config"].get("learning_rate", 5e-4), "beta": run["config"].get("beta", 0.0)}
    for change in settings_plan(events):
        now.update(change.changes)
    return trl_changes(given, **now)


#: A TRL run's rules for ``rlab set`` (registered as the ``trl`` trainer).
SETTINGS = TrainerSettings(TRL_BETWEEN_STEPS, TRL_REFUSED, _stored_run_changes)


def current_settings(trainer: Any) -> tuple[float, float]:
    """The trainer's schedule peak (its scheduler's base rate; GRPOConfig's learning_rate
    before the first step, or where the scheduler keeps no base rates: DeepSpeed's, in
    accelerate's wrapper) and KL weight now (nan where it has none)."""
    base_lrs = getattr(getattr(trainer, "lr_scheduler", None), "base_lrs", None)
    lr = base_lrs[0] if base_lrs else getattr(getattr(trainer, "args", None), "learning_rate", math.nan)
    return float(lr), float(getattr(trainer, "beta", math.nan))


def apply_settings(trainer: Any, changes: dict[str, Any]) -> None:
    """The new schedule peak (``lr``) and KL weight (``beta``) from the trainer's next update.

    Raises:
        ValueError: ``lr`` for a trainer whose scheduler is not a LambdaLR (:func:`lambda_scheduler`).
    """
    if "lr" in changes:
        scheduler = lambda_scheduler(trainer)
        scheduler.base_lrs = [changes["lr"]] * len(scheduler.base_lrs)
        # the rate of the next update: the new peak times the schedule's factor now (LambdaLR's rule)
        groups = scheduler.optimizer.param_groups
        for group, fn in zip(groups, scheduler.lr_lambdas):
            group["lr"] = changes["lr"] * fn(scheduler.last_epoch)
        # the Trainer logs that update's learning_rate from get_last_lr(), which the scheduler
        # otherwise sets only when it next steps (after the update)
        scheduler._last_lr = [group["lr"] for group in groups]
    if "beta" in changes:
        trainer.beta = changes["beta"]


def lambda_scheduler(trainer: Any) -> Any:
    """The trainer's learning-rate scheduler, when it is a ``LambdaLR`` (the HF
    Trainer's schedules are): its base rates can change between steps.

    Raises:
        ValueError: another scheduler (e.g. DeepSpeed's), whose rates this cannot rescale safely.
    """
    from torch.optim.lr_scheduler import LambdaLR

    scheduler = getattr(trainer, "lr_scheduler", None)
    if not isinstance(scheduler, LambdaLR):
        raise ValueError(f"lr: the trainer's scheduler is {type(scheduler).__name__}, not a LambdaLR, so its rates "
                         "cannot be rescaled safely between steps; set learning_rate in GRPOConfig and restart")
    return scheduler
