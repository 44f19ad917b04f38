"""What every alert is made of: the :class:`Alert` it raises, the :class:`Shared` setting,
the :class:`StepView` it reads and the :class:`AlertCheck` it subclasses.

An alert is one module of ``engine/alerts/kinds/``, named as its kind, holding
its settings (a :class:`Shared` subclass: each field a threshold, so ``--alert
NAME=VALUE``, ``rlab set RUN alert.NAME=VALUE`` and ``rlab watch --alert``
take it), its state (on the instance) and its check, and the sentence README's
table gives it.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from rlab.engine.alerts.inputs import GroupStats


@dataclass(frozen=True)
class Alert:
    """One alert: its kind, the step that raised it, a sentence, the groups to open.

    ``action`` is ``"pause"`` when the run pauses on it, else ``"warn"``.
    """

    kind: str
    step: int
    message: str
    group_ids: tuple[int, ...] = ()
    value: float | None = None
    action: str = "warn"

    def payload(self) -> dict[str, Any]:
        """The ``alert`` event's payload (``alert`` is the kind)."""
        return {"alert": self.kind, "message": self.message, "group_ids": list(self.group_ids),
                "value": self.value, "action": self.action}

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> Alert:
        """The alert of a stored ``alert`` event (``{"step", "payload"}``)."""
        payload = event.get("payload") or {}
        return cls(str(payload.get("alert")), int(event.get("step") or 0), str(payload.get("message", "")),
                   tuple(payload.get("group_ids") or ()), payload.get("value"), str(payload.get("action", "warn")))

    def line(self) -> str:
        """One line for a log or a terminal: step, kind, message and what the run did."""
        did = "; the run paused" if self.action == "pause" else ""
        groups = f" (groups {', '.join(map(str, self.group_ids[:5]))})" if self.group_ids else ""
        return f"alert at step {self.step}: {self.kind}: {self.message}{groups}{did}"


class Shared(BaseModel):
    """The setting every alert reads; an alert's settings subclass it with their own thresholds."""

    model_config = ConfigDict(extra="forbid")

    window: int = Field(10, ge=2, description="Steps in the plateau window and the early baseline.")


@dataclass(frozen=True)
class StepView:
    """What an alert reads of one step: its number, its metrics row (TRL names:
    ``reward``, ``completions/mean_length``, ``frac_reward_zero_std``,
    ``entropy``; the lab's ``success_rate``, ``eval/pass_at_1``, ``tools/*``),
    its groups, and the rubric's total positive weight (the most reward a
    trajectory can earn; 1.0 when unknown)."""

    step: int
    metrics: Mapping[str, Any]
    groups: list[GroupStats]
    reward_scale: float = 1.0

    def finite(self, name: str) -> float | None:
        """Metric ``name`` when it is a finite number, else None (not logged, or nan)."""
        return finite(self.metrics.get(name))


S = TypeVar("S", bound=Shared)


class AlertCheck(ABC, Generic[S]):
    """One alert kind: its settings, its state and its check.

    A subclass names its ``kind`` (its module's name), its ``settings_model``,
    the ``fires_when`` sentence of README's table, and whether it names a
    reward the policy games (``reward_hole``: the recorder then says to fix
    the reward, not the learning rate). The watch (``engine.alerts.watch``)
    makes one per run, feeds it every step in order and decides when an alert
    starts; the check only says whether its condition holds at this step.
    """

    kind: ClassVar[str]
    fires_when: ClassVar[str]
    reward_hole: ClassVar[bool] = False
    settings_model: type[S]

    def __init__(self, thresholds: BaseModel) -> None:
        """Args: thresholds: the run's ``AlertThresholds`` (every alert's settings); this
        alert keeps its own."""
        self.settings: S = self._own(thresholds)

    def retune(self, thresholds: BaseModel) -> None:
        """Judge the next steps by ``thresholds``; a subclass keeps its state (its windows
        cut or grown to the new ``window``)."""
        self.settings = self._own(thresholds)

    @abstractmethod
    def check(self, view: StepView) -> Alert | None:
        """The alert this step raises, or None; called once a step, steps in order."""

    def alert(self, view: StepView, message: str, group_ids: Iterable[int] = (),
              value: float | None = None) -> Alert:
        """This kind's alert at ``view``'s step."""
        return Alert(self.kind, view.step, message, tuple(group_ids), value)

    def _own(self, thresholds: BaseModel) -> S:
        # the run's thresholds were checked whole; this takes this alert's part of them
        return self.settings_model.model_validate(
            {name: getattr(thresholds, name) for name in self.settings_model.model_fields})


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number, else None (a metric not logged, or nan)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None
