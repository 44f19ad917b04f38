"""Scenarios: tasks with their data, environment and rubric (reward file).

A scenario is looked up by name with :func:`get_scenario`. Built-in
scenarios are found, not listed: every sub-package of ``rlab.scenarios``
is one, exposing a module-level ``SCENARIO`` that satisfies
:class:`rlab.engine.types.Scenario` (docs/interfaces.md), so adding a
scenario is adding a folder. Scenarios from other installed packages
register under the entry-point group :data:`ENTRY_POINT_GROUP` (the name is
the scenario's, the object its ``SCENARIO`` or a module holding one), so
they are used without editing this package; a built-in name always wins.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Mapping
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from rlab.engine.types import Scenario
from rlab.store.errors import UsageError

#: The scenario a run uses when none is named (the embedded tiny policy's).
DEFAULT_SCENARIO = "arithmetic"
#: Entry-point group under which other packages register scenarios.
ENTRY_POINT_GROUP = "rlab.scenarios"


@functools.cache
def builtin_scenarios() -> tuple[str, ...]:
    """Names of the built-in scenarios (the sub-packages of this package),
    the default first, then alphabetical."""
    found = sorted(m.name for m in pkgutil.iter_modules(__path__) if m.ispkg)
    return (DEFAULT_SCENARIO, *[n for n in found if n != DEFAULT_SCENARIO])


def scenario_names() -> tuple[str, ...]:
    """Every scenario name a run accepts: the built-in ones, then those of
    installed packages (entry points), sorted; a name taken by a built-in is skipped."""
    builtin = builtin_scenarios()
    plugins = sorted({ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)} - set(builtin))
    return (*builtin, *plugins)


class UnknownScenarioError(UsageError):
    """Raised by :func:`get_scenario` for a name that is not a scenario (:func:`scenario_names`)."""


def get_scenario(name: str | Mapping[str, Any]) -> Scenario:
    """Return the scenario called ``name``, or the user task it refers to.

    A task reference is a task.toml (or its folder), ``reasoning-gym:NAME``,
    ``verifiers:MODULE`` or a table of task keys (``scenarios.task_file``).

    Raises:
        UnknownScenarioError: ``name`` is neither a scenario
            (:func:`scenario_names`) nor a task reference; the message lists
            the known names.
        scenarios.task_scenario.TaskError: a task that cannot be loaded.
    """
    if not isinstance(name, str) or _is_task(name):
        from rlab.scenarios.task_file import load_task

        return load_task(name)
    if name in builtin_scenarios():
        return importlib.import_module(f"{__name__}.{name}").SCENARIO
    plugin = next((ep for ep in entry_points(group=ENTRY_POINT_GROUP, name=name)), None)
    if plugin is None:
        known = ", ".join(scenario_names())
        raise UnknownScenarioError(f"unknown scenario {name!r}; choose one of: {known} "
                                   "(or --task PATH for your own task)")
    loaded = plugin.load()
    return getattr(loaded, "SCENARIO", loaded)


def _is_task(name: str) -> bool:
    return name not in builtin_scenarios() and (":" in name or name.endswith(".toml") or Path(name).exists())


def load_scenario(name: str, task: str | Mapping[str, Any] | None = None) -> Scenario:
    """A run's scenario: its ``task`` (always read as a task, so a missing
    task.toml is named as such) when given, else :func:`get_scenario` of ``name``.

    Raises:
        UnknownScenarioError: no scenario ``name``.
        scenarios.task_scenario.TaskError: the task cannot be loaded.
    """
    if task is None:
        return get_scenario(name)
    from rlab.scenarios.task_file import load_task

    return load_task(task)
