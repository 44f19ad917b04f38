"""The watch's thresholds, and which alerts pause the run (``rlab run --alert NAME=VALUE``).

:class:`AlertThresholds` is one flat model of every alert's settings (each
alert declares its own in its module, ``engine/alerts/kinds/``), so a run
config's ``"alerts"`` dict, ``--alert`` and ``rlab set RUN alert.NAME`` name
a threshold without naming its alert.
"""

from __future__ import annotations

from copy import copy
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field, create_model, field_validator

from rlab.engine.alerts.base import AlertCheck, Shared
from rlab.engine.alerts.kinds import CHECKS

#: Every alert kind, in the order the watch checks them.
ALERT_KINDS = tuple(check.kind for check in CHECKS)
#: Alerts that name a reward the policy games rather than a policy that broke.
REWARD_HOLES = tuple(check.kind for check in CHECKS if check.reward_hole)


class _Common(Shared):
    """The settings that are no one alert's: ``window`` (every alert's) and ``pause_on``."""

    #: the alerts whose settings these are, the kinds ``pause_on`` may name
    alert_kinds: ClassVar[tuple[str, ...]] = ()

    pause_on: list[str] = Field(["collapse"], description="Alert kinds that pause the run (the others only warn).")

    @field_validator("pause_on", mode="before")
    @classmethod
    def _kinds(cls, value: Any) -> Any:
        """A comma-separated string is a list; every name must be an alert kind."""
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        unknown = sorted(set(value) - set(cls.alert_kinds)) if isinstance(value, list) else []
        if unknown:
            raise ValueError(f"pause_on names {unknown}, which are not alerts; "
                             f"the alerts: {', '.join(cls.alert_kinds)}")
        return value


_DOC = """Configurable thresholds of the run's watch, and which alerts pause the run.

    Build it from a dict (e.g. a run config's ``"alerts"`` entry, set with
    ``rlab run --alert NAME=VALUE``) with ``AlertThresholds.model_validate(d)``;
    unknown keys raise a ``pydantic.ValidationError`` naming the key, so typos
    are caught. ``pause_on`` is a list of alert kinds (or one comma-separated
    string: ``--alert pause_on=collapse,hack``; empty: never pause).
    """


def _flat(checks: tuple[type[AlertCheck[Any]], ...]) -> type[_Common]:
    """One model of ``window``, ``pause_on`` and every alert's own settings.

    Raises:
        TypeError: two alerts declare a setting of one name (``--alert NAME`` would be ambiguous).
    """
    fields: dict[str, Any] = {}
    for check in checks:
        for name, info in check.settings_model.model_fields.items():
            if name in Shared.model_fields:
                continue
            if name in fields or name in _Common.model_fields:
                raise TypeError(f"the {check.kind} alert's setting {name!r} is named as another setting")
            fields[name] = (info.annotation, copy(info))
    model = create_model("AlertThresholds", __base__=_Common, __module__=__name__, __doc__=_DOC, **fields)
    model.alert_kinds = tuple(check.kind for check in checks)
    return model


if TYPE_CHECKING:  # mypy reads the fields every alert shares; each alert reads its own typed
    class AlertThresholds(_Common):
        """See ``_DOC``."""
else:
    AlertThresholds = _flat(CHECKS)
