"""Write a TRL GRPOTrainer run straight into an rlab run file.

    from trl import GRPOTrainer
    from rlab.engine.integrations.trl import RlabCallback

    trainer = GRPOTrainer(model=..., reward_funcs=[...], args=config, train_dataset=...)
    trainer.add_callback(RlabCallback("runs.db", trainer=trainer))
    trainer.train()

then, from another terminal, ``rlab watch --db runs.db`` shows the run live:
groups, per-reward-function components, advantages and TRL's own metrics.

At every logging step (``on_log``) the callback reads the table TRL is about
to write to ``completions/completions_{step:05d}.parquet`` (prompts,
completions, one reward column per function, advantages: the trainer's
``_logs`` buffer, so ``log_completions`` need not be on) and the logged
metrics, turns them into groups with the same code as ``rlab import``
(:func:`rlab.store.formats.trl.rows_to_step`), and writes them in one
transaction. With ``logging_steps > 1`` the buffer holds the last generation
batch only, as TRL's own file does. The run is ``finished`` at the end of
training; if the trainer raises, ``on_train_end`` is not reached and the
next open of the file marks the run ``crashed`` (its process is gone).

Only the main process writes (``state.is_world_process_zero``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from rlab.store.db import write_transaction
from rlab.store.formats.trl import FIXED_COLUMNS, NAME, rows_to_step
from rlab.store.formats.write import append_steps, free_name
from rlab.store.writer import StoreWriter


def logged_table(buffer: dict) -> tuple[list[str], list[dict]]:
    """TRL's ``_logs`` buffer (``prompt``, ``completion``, ``rewards``:
    {name: values}, ``extra``: {column: values}, ``advantages``) as the
    columns and rows of its completions table."""
    columns = {"prompt": list(buffer.get("prompt", [])),
               "completion": list(buffer.get("completion", [])),
               **{name: list(v) for name, v in (buffer.get("rewards") or {}).items()},
               **{name: list(v) for name, v in (buffer.get("extra") or {}).items()
                  if name not in FIXED_COLUMNS},
               "advantage": list(buffer.get("advantages", []))}
    size = len(columns["prompt"])
    names = list(columns)
    rows = [{name: columns[name][i] if i < len(columns[name]) else None for name in names}
            for i in range(size)]
    return names, rows


class RlabCallback(TrainerCallback):
    """A ``transformers.TrainerCallback`` writing each logged GRPO step into
    the run file ``db`` (see the module doc).

    Args:
        db: the SQLite run file (created if missing).
        trainer: the GRPOTrainer (its ``_logs`` buffer holds the completions).
        name: the run name (default ``{output_dir name}-trl``, made unique).
    """

    def __init__(self, db: str | Path, *, trainer: Any, name: str | None = None) -> None:
        self.db = Path(db)
        self.trainer = trainer
        self.name = name
        self.writer: StoreWriter | None = None
        self.run_id: int | None = None
        self.last_step = -1

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        self.writer = StoreWriter(self.db)
        name = self.name or free_name(self.writer, f"{Path(args.output_dir).name}-{NAME}")
        config = {k: v for k, v in args.to_dict().items()
                  if isinstance(v, (int, float, str, bool)) and "token" not in k}
        self.run_id = self.writer.start_run(
            name, NAME, config, {"format": NAME, "output_dir": str(args.output_dir),
                                 "source": "rlab.engine.integrations.trl"})
        self.name = name

    def on_log(self, args, state, control, logs=None, **kwargs):
        # The end-of-training summary is logged at the last step again (with
        # train_runtime); eval logs carry eval_ keys: neither is a new step.
        if (self.writer is None or not logs or state.global_step <= self.last_step
                or any(k.startswith("eval_") for k in logs)):
            return
        columns, rows = logged_table(getattr(self.trainer, "_logs", {}) or {})
        if not rows:
            return
        metrics = {k: float(v) for k, v in logs.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}
        step = rows_to_step(Path(args.output_dir), state.global_step, columns, rows,
                            {state.global_step: metrics})
        with write_transaction(self.writer.database):
            append_steps(self.writer, self.run_id, [step])
        self.last_step = state.global_step

    def on_train_end(self, args, state, control, **kwargs):
        if self.writer is None:
            return
        self.writer.set_status(self.run_id, "finished")
        self.writer.close()
        self.writer = None
