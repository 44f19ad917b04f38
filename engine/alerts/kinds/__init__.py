"""The alerts, one module each, named as its kind, and those other packages install.

Each module here holds one :class:`~rlab.engine.alerts.base.AlertCheck`
subclass (its settings, state, check and README sentence): adding a module
adds an alert. Another package adds one without editing this one: it
declares its class under the entry-point group :data:`ENTRY_POINT_GROUP`,
named as its kind (``steady = "my_alerts:Steady"``). The watch, the
thresholds (``--alert``, ``rlab set RUN alert.NAME``, ``rlab watch
--alert``), the recorder's reward holes and README's table read
:data:`CHECKS`, found here when the package is imported.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from rlab.engine.alerts.base import AlertCheck

#: Entry-point group under which other packages register alerts (the name is the kind).
ENTRY_POINT_GROUP = "rlab.alerts"


def _builtin() -> list[type[AlertCheck[Any]]]:
    """Every module's alert.

    Raises:
        TypeError: a module holds no alert or two, or one not named as its module.
    """
    checks = []
    for module in pkgutil.iter_modules(__path__):
        loaded = importlib.import_module(f"{__name__}.{module.name}")
        own = [value for value in vars(loaded).values() if isinstance(value, type)
               and issubclass(value, AlertCheck) and value.__module__ == loaded.__name__]
        if len(own) != 1 or own[0].kind != module.name:
            raise TypeError(f"{loaded.__name__} must hold one AlertCheck whose kind is {module.name!r}; "
                            f"it holds {[c.__name__ for c in own]}")
        checks += own
    return checks


def _plugins(taken: set[str]) -> list[type[AlertCheck[Any]]]:
    """The alerts installed packages declare under :data:`ENTRY_POINT_GROUP`.

    A plugin whose import fails is left out with a line on stderr (as
    harlequin does), so one broken package does not stop every run; its
    ``--alert`` settings are then refused as unknown.

    Raises:
        TypeError: an entry point is no AlertCheck subclass, is not named as
            its kind, or names a kind already taken (two alerts of one kind
            would share their settings and their pause).
    """
    checks = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            check = point.load()
        except ImportError as error:
            print(f"rlab: the alert {point.name!r} ({point.value}) could not be loaded: {error}", file=sys.stderr)
            continue
        _refuse_odd(point, check, taken)
        taken.add(point.name)
        checks.append(check)
    return checks


def _refuse_odd(point: EntryPoint, check: object, taken: set[str]) -> None:
    """Raises TypeError when ``check`` cannot be the alert ``point`` names (see :func:`_plugins`)."""
    if not (isinstance(check, type) and issubclass(check, AlertCheck)) or check.kind != point.name:
        raise TypeError(f"the entry point {point.name} = {point.value!r} of {ENTRY_POINT_GROUP} must be "
                        f"an AlertCheck subclass whose kind is {point.name!r}")
    if point.name in taken:
        raise TypeError(f"the entry point {point.name} = {point.value!r} of {ENTRY_POINT_GROUP} names "
                        "an alert kind already taken")


def _found() -> tuple[type[AlertCheck[Any]], ...]:
    """Every alert, this package's and the installed ones, by kind (errors: see above)."""
    builtin = _builtin()
    checks = builtin + _plugins({check.kind for check in builtin})
    return tuple(sorted(checks, key=lambda check: check.kind))


#: Every alert, in the order the watch checks them (by kind).
CHECKS = _found()
