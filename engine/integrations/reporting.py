"""Step metrics to the dashboards people already keep: Trackio and TensorBoard.

``rlab run --report-to trackio,tensorboard`` (TRL's ``report_to``) logs every
numeric step metric the store gets, under the names a TRL ``GRPOTrainer``
run shows in the same dashboard: transformers' ``rewrite_logs`` prefixes
training metrics with ``train/`` (``train/reward``,
``train/rewards/{name}/mean``, ``train/frac_reward_zero_std``, ...) and
evaluation metrics keep ``eval/`` (``eval/pass_at_1``). The x axis is the
engine step.

Where the logs go:

- ``trackio``: Trackio's local storage (``$TRACKIO_DIR``, by default
  ``~/.cache/huggingface/trackio``), project = the run file's stem (``rlab``
  for ``rlab.db``), run = the run's name; never a Space, so no network.
  View with ``trackio show --project rlab``.
- ``tensorboard``: event files in ``<report_dir>/<run name>/``
  (``report_dir`` defaults to ``<db>.tensorboard``), written through
  ``torch.utils.tensorboard``. View with ``tensorboard --logdir rlab.db.tensorboard``.

Both packages are optional (extras ``rollout-lab[trackio]``,
``rollout-lab[tensorboard]``, or both as ``rollout-lab[dashboards]``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from rlab.store.errors import UsageError
from rlab.store.secrets import scrub

#: --report-to value -> (module imported, pip extra that installs it).
BACKENDS = {"trackio": ("trackio", "trackio"), "tensorboard": ("tensorboard", "tensorboard")}


class MissingDashboardError(UsageError):
    """A ``--report-to`` backend whose package is not installed (message: the extra to install)."""


def missing_package(report_to: Sequence[str]) -> str | None:
    """The error for the first ``report_to`` backend whose package is not
    installed, or None when all are. Cheap: finds the packages, imports nothing."""
    for name in report_to:
        module, extra = BACKENDS[name]
        if importlib.util.find_spec(module) is None:
            return (f"--report-to {name}: the {module} package is not installed; "
                    f"pip install 'rollout-lab[{extra}]' (or leave {name} out of --report-to)")
    return None


def dashboard_names(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The finite numeric metrics, named as transformers' Trainer names them in
    a dashboard (``rewrite_logs``): ``eval/...`` kept, everything else
    ``train/...``. Booleans, None and NaN/inf are left out."""
    out: dict[str, float] = {}
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        out[key if key.startswith("eval/") else f"train/{key}"] = float(value)
    return out


class _Backend(Protocol):
    def log(self, step: int, metrics: dict[str, float]) -> None: ...

    def close(self) -> None: ...


class _Trackio:
    """One Trackio run in local storage; its console notes go to stderr,
    because the engine's stdout carries only the summary line."""

    def __init__(self, project: str, run_name: str, config: dict[str, Any]) -> None:
        with contextlib.redirect_stdout(sys.stderr):
            import trackio

            self._trackio = trackio
            # resume="allow": `rlab run --resume` continues the same Trackio run.
            self._run = trackio.init(project=project, name=run_name, config=config, resume="allow",
                                     space_id=None, auto_log_cpu=False, auto_log_gpu=False)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._run.log(metrics, step=step)

    def close(self) -> None:
        with contextlib.redirect_stdout(sys.stderr):
            # trackio.finish (not the run's): it also forgets the current run,
            # so trackio's exit hook does not finish it again (onto stdout).
            self._trackio.finish()


class _TensorBoard:
    """One event-file folder per run (``log_dir``), flushed every step so a
    crash loses nothing already logged."""

    def __init__(self, log_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(log_dir))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for tag, value in metrics.items():
            self._writer.add_scalar(tag, value, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class Reporter:
    """The run's dashboards: :meth:`open` once the run has a name, :meth:`log`
    once per step, :meth:`close` at the end (also after a crash).

    Args:
        report_to: backend names (``BACKENDS`` keys); empty = log nowhere.
        db: the run file (names the Trackio project and the default TensorBoard folder).
        report_dir: TensorBoard's parent folder; None = ``<db>.tensorboard``.

    Raises:
        MissingDashboardError: a backend's package is not installed
            (checked here, before the run starts).
    """

    def __init__(self, report_to: Sequence[str], db: Path, report_dir: Path | None = None) -> None:
        problem = missing_package(report_to)
        if problem is not None:
            raise MissingDashboardError(problem)
        self.report_to = list(report_to)
        self.db = db
        self.report_dir = report_dir if report_dir is not None else db.with_name(db.name + ".tensorboard")
        self._backends: list[_Backend] = []

    def open(self, run_name: str, config: dict[str, Any]) -> None:
        """Start logging run ``run_name`` (``config``: its options, shown by
        Trackio after credentials are scrubbed)."""
        config = scrub(config)
        for name in self.report_to:
            if name == "trackio":
                self._backends.append(_Trackio(self.db.stem, run_name, config))
            else:
                self._backends.append(_TensorBoard(self.report_dir / run_name))

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        """Log one step's metrics (see :func:`dashboard_names`) at x = ``step``."""
        named = dashboard_names(metrics)
        for backend in self._backends:
            backend.log(step, named)

    def close(self) -> None:
        """Flush and close every backend opened."""
        while self._backends:
            self._backends.pop().close()
