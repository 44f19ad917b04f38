"""The alerts, one module each, named as its kind: adding a module here adds an alert.

Each module holds one :class:`~rlab.engine.alerts.base.AlertCheck` subclass
(its settings, state, check and README sentence). The watch, the thresholds
(``--alert``, ``rlab set RUN alert.NAME``, ``rlab watch --alert``), the
recorder's reward holes and README's table read :data:`CHECKS`, found here
when the package is imported.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from rlab.engine.alerts.base import AlertCheck

def _found() -> tuple[type[AlertCheck[Any]], ...]:
    """Every module's alert, by kind.

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
    return tuple(sorted(checks, key=lambda check: check.kind))


#: Every alert, in the order the watch checks them (by kind).
CHECKS = _found()
