"""The watch: every alert fed every step, and each alert raised once as its condition starts.

Every alert is edge-triggered: it fires on the step where its condition
becomes true, not again while it stays true, nor until it has been false for
``window`` steps, so a long run (or a value hovering at its threshold) does
not drown the panel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from rlab.engine.alerts.base import Alert, AlertCheck, StepView
from rlab.engine.alerts.inputs import GroupStats
from rlab.engine.alerts.kinds import CHECKS
from rlab.engine.alerts.thresholds import AlertThresholds


class AlertWatch:
    """Stateful, edge-triggered alert detector; feed it steps in order.

    Call :meth:`observe` once per step with the step's metrics row (TRL names:
    ``reward``, ``completions/mean_length``, ``frac_reward_zero_std``,
    ``entropy``; the lab's ``success_rate`` and ``eval/pass_at_1``) and the
    step's groups. Each alert keeps sliding windows of ``thresholds.window``
    steps plus its early baselines and bests, so memory does not grow with
    the run.

    Args:
        thresholds: the thresholds and ``pause_on`` (default: the defaults).
        reward_scale: the rubric's total positive weight, the most reward a
            trajectory can earn (hack compares the reward's rise divided by
            it with the success rate's rise); 1.0 when unknown.
        checks: the alerts to run (default: every module of ``kinds/``);
            ``thresholds`` holds their settings.
    """

    def __init__(self, thresholds: AlertThresholds | None = None, reward_scale: float = 1.0,
                 checks: Sequence[type[AlertCheck[Any]]] = CHECKS) -> None:
        self.thresholds = thresholds or AlertThresholds()
        self.reward_scale = reward_scale
        self.checks = [check(self.thresholds) for check in checks]
        self._active: set[str] = set()
        self._quiet: dict[str, int] = {}
        self.last_step: int | None = None

    def retune(self, thresholds: AlertThresholds) -> None:
        """Judge the next steps by ``thresholds`` (``rlab set RUN alert.NAME=VALUE``).

        The history stays: the windows keep their newest steps (cut or grown
        to the new ``window``), the early baselines and the best success so far.
        """
        self.thresholds = thresholds
        for check in self.checks:
            check.retune(thresholds)

    def observe(self, step: int, metrics: Mapping[str, Any], groups: list[GroupStats]) -> list[Alert]:
        """Check one step; return the alerts that start at this step.

        Raises:
            ValueError: steps fed out of order (each step once, increasing),
                since the plateau window and baselines depend on order.
        """
        if self.last_step is not None and step <= self.last_step:
            raise ValueError(f"steps must increase: got {step} after {self.last_step}")
        self.last_step = step
        view = StepView(step, metrics, groups, self.reward_scale)
        fired = []
        for check in self.checks:
            alert = check.check(view)
            if self._starts(check.kind, alert):
                assert alert is not None
                fired.append(replace(alert, action="pause" if check.kind in self.thresholds.pause_on else "warn"))
        return fired

    def _starts(self, kind: str, alert: Alert | None) -> bool:
        """Whether ``alert`` (None: its condition is false) starts a new alert of ``kind``."""
        if alert is None:
            # re-armed only after `window` quiet steps, so a value that
            # hovers around its threshold does not fire every other step
            self._quiet[kind] = self._quiet.get(kind, 0) + 1
            if self._quiet[kind] >= self.thresholds.window:
                self._active.discard(kind)
            return False
        self._quiet[kind] = 0
        if kind in self._active:
            return False
        self._active.add(kind)
        return True
