"""How the processes of a distributed TRL run agree: the trainer's own process group.

A GRPOTrainer under ``accelerate launch`` or ``torchrun`` runs one process
per GPU (per CPU slot with gloo); every process runs the same callbacks and
reward functions in the same order. The lab's attachment
(:mod:`rlab.engine.integrations.trl`) lets only the main process touch the
run file and makes the others follow it through two collectives of
accelerate's (over the process group the trainer already set up; nothing
new is opened):

- :meth:`Ranks.broadcast`: the main process's decision (go on, pause, stop,
  switch to reward version N) reaches every process;
- :meth:`Ranks.gather`: every process's list (its rows of a generation
  batch, its answer to "did version N load here?") reaches every process,
  in rank order (``all_gather_object``).

Both are collectives: every process must call them at the same point, the
same number of times, or the run hangs. The callback calls them only from
hooks every process runs (``on_step_end``, the reward functions TRL calls
on every process), never from main-only code. A single process (no
``torch.distributed``) needs no agreement: both return their argument.
"""

from __future__ import annotations

from typing import Any


class Ranks:
    """The processes of one trainer, seen from one of them.

    Args:
        accelerator: the trainer's ``accelerate.Accelerator``
            (``trainer.accelerator``); None for a single process.

    Attributes:
        index: this process's global rank (0 is the main process).
        count: the number of processes.
        is_main: this process writes the run file.
    """

    def __init__(self, accelerator: Any = None) -> None:
        self.index = int(getattr(accelerator, "process_index", 0))
        self.count = int(getattr(accelerator, "num_processes", 1))
        self.is_main = bool(getattr(accelerator, "is_main_process", True))

    def broadcast(self, value: Any) -> Any:
        """The main process's ``value`` on every process (a picklable object;
        what other processes pass is ignored)."""
        if self.count == 1:
            return value
        from accelerate.utils import broadcast_object_list

        box = [value]
        broadcast_object_list(box, from_process=0)
        return box[0]

    def gather(self, items: list) -> list:
        """Every process's ``items`` (a list of picklable objects), concatenated
        in rank order, on every process."""
        if self.count == 1:
            return list(items)
        from accelerate.utils import gather_object

        return list(gather_object(list(items)))
