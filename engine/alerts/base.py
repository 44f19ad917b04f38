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
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from operator import itemgetter
from statistics import fmean
from typing import Any, ClassVar, Generic, TypeVar, get_args, get_origin

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
T = TypeVar("T")


class Recent(Generic[T]):
    """The newest ``window`` values an alert keeps, oldest first.

    Made by :meth:`AlertCheck.recent`, so a retuned ``window`` cuts or grows
    it, keeping the newest values.
    """

    def __init__(self, size: int) -> None:
        self._values: deque[T] = deque(maxlen=size)

    def resize(self, size: int) -> None:
        """Keep the newest ``size`` values from now on."""
        self._values = deque(self._values, maxlen=size)

    def append(self, value: T) -> None:
        """Add the newest value (the oldest leaves a full window)."""
        self._values.append(value)

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[T]:
        return iter(self._values)

    def __getitem__(self, index: int) -> T:
        """Raises IndexError, as a list does."""
        return self._values[index]

    @property
    def full(self) -> bool:
        """Whether it holds a whole window."""
        return len(self._values) == self._values.maxlen

    def halves(self) -> tuple[list[T], list[T]]:
        """The older and the newer half (an odd count's middle value in neither)."""
        values, half = list(self._values), len(self._values) // 2
        return values[:half], values[len(values) - half:]

    def rise(self, of: Callable[[T], float]) -> float:
        """The mean of ``of`` over the newer half minus its mean over the older half.

        Raises:
            statistics.StatisticsError: fewer than two values.
        """
        older, newer = self.halves()
        return fmean(map(of, newer)) - fmean(map(of, older))


class Trend:
    """Two metrics over the newest ``window`` steps that logged both, to compare how each moved
    (:meth:`AlertCheck.trend` makes one)."""

    def __init__(self, steps: Recent[tuple[float, float]], first: str, second: str) -> None:
        self.steps = steps
        self._names = (first, second)

    def rises(self, view: StepView) -> tuple[float, float] | None:
        """Take this step's two metrics; once a window of steps is in, how far each one's mean
        over the newer half lies above its mean over the older half. None before, and at a
        step that did not log both (it is not taken)."""
        first, second = (view.finite(name) for name in self._names)
        if first is None or second is None:
            return None
        self.steps.append((first, second))
        if not self.steps.full:
            return None
        return self.steps.rise(itemgetter(0)), self.steps.rise(itemgetter(1))


class Baseline:
    """A metric's early level: the mean of its first ``window`` values."""

    def __init__(self) -> None:
        self._values: list[float] = []

    def level(self, value: float, window: int) -> float | None:
        """The early level once ``window`` values are in; until then None, ``value`` being one of them."""
        if len(self._values) < window:
            self._values.append(value)
            return None
        return fmean(self._values)

    def against(self, view: StepView, metric: str, window: int) -> tuple[float, float] | None:
        """This step's ``metric`` and its early level, once ``window`` steps logged it; None
        before, and at a step that did not log it (or logged nan)."""
        value = view.finite(metric)
        if value is None:
            return None
        level = self.level(value, window)
        return None if level is None else (value, level)


class AlertCheck(ABC, Generic[S]):
    """One alert kind: its settings, its state and its check.

    A subclass of ``AlertCheck[Settings]`` (its ``settings_model``) names its
    ``kind`` (its module's name), the ``fires_when`` sentence of README's
    table, and whether it names a reward the policy games (``reward_hole``:
    the recorder then says to fix the reward, not the learning rate); its
    state is set up in :meth:`begin`. The watch (``engine.alerts.watch``)
    makes one per run, feeds it every step in order and decides when an alert
    starts; the check only says whether its condition holds at this step.
    """

    kind: ClassVar[str]
    fires_when: ClassVar[str]
    reward_hole: ClassVar[bool] = False
    settings_model: type[S]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # AlertCheck[Settings] names the settings once: settings_model is Settings
        super().__init_subclass__(**kwargs)
        for base in getattr(cls, "__orig_bases__", ()):
            (model,) = get_args(base) or (None,)
            if get_origin(base) is AlertCheck and isinstance(model, type):
                cls.settings_model = model

    def __init__(self, thresholds: BaseModel) -> None:
        """Args: thresholds: the run's ``AlertThresholds`` (every alert's settings); this
        alert keeps its own."""
        self.settings: S = self._own(thresholds)
        self._recents: list[Recent[Any]] = []
        self.begin()

    def begin(self) -> None:
        """Set up the alert's state before its first step (``self.settings`` is set);
        an alert that keeps none leaves this as it is."""

    def retune(self, thresholds: BaseModel) -> None:
        """Judge the next steps by ``thresholds``; the state stays, the windows of
        :meth:`recent` cut or grown to the new ``window``."""
        self.settings = self._own(thresholds)
        for recent in self._recents:
            recent.resize(self.settings.window)

    def recent(self) -> Recent[T]:
        """A window of the newest ``window`` values, resized when the alert is retuned
        (annotate what it holds: ``self._rewards: Recent[float] = self.recent()``)."""
        made: Recent[T] = Recent(self.settings.window)
        self._recents.append(made)
        return made

    def trend(self, first: str, second: str) -> Trend:
        """Metrics ``first`` and ``second`` over the newest ``window`` steps, resized as :meth:`recent` is."""
        return Trend(self.recent(), first, second)

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


def top_groups(score: Mapping[int, float], highest: bool = True) -> list[int]:
    """The five groups of the highest (or lowest) ``score``: those an alert names to open."""
    return sorted(score, key=score.__getitem__, reverse=highest)[:5]


def finite(value: Any) -> float | None:
    """``value`` as a float when it is a finite number, else None (a metric not logged, or nan)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None
