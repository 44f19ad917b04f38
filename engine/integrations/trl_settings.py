"""``rlab set`` on a TRL run: the learning rate's peak and the KL weight, applied on every process.

The attachment decides on the main process which changes a TRL run takes
(``engine.settings.trl_changes``) and broadcasts them; at the same step end
every process calls :func:`apply_settings` on its own trainer, so all ranks
train the next step with the same values.
"""

from __future__ import annotations

import math
from typing import Any


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
