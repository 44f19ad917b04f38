"""Scenarios: tasks with their data, environment and rubric (reward file).

A scenario is looked up by name with :func:`get_scenario`. Each one lives in
its own sub-package and exposes a module-level ``SCENARIO`` object that
satisfies :class:`Scenario` (see docs/interfaces.md).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from rlab.engine.types import Environment, Example

#: Scenario names in the order the TUI offers them; the first is the default.
SCENARIOS: tuple[str, ...] = ("arithmetic", "number_guess", "game2048", "support_replies", "reward_hacking", "maze", "maze_large", "maze_tight", "maze_loose", "maze_loose_strict")

DEFAULT_SCENARIO = SCENARIOS[0]


@runtime_checkable
class Scenario(Protocol):
    """What the engine needs from a task (single-turn; see :class:`MultiStepScenario`).

    name: the scenario's name in run files. multi_step: its trajectories are
    environment episodes (then it is also a :class:`MultiStepScenario`).
    system_prompt: the first message of every prompt, or None. reward_file:
    the rubric file each run copies and may edit. judge_rubric: the RULER
    judge's instructions for this task, or None for the judge's default.
    warm_start_target / warm_start_steps: the tiny policy's warm start stops
    at this greedy probe pass@1 (None: never early) or after this many
    supervised steps. run_defaults: RunConfig values this task needs instead
    of the arithmetic recipe's (e.g. a longer ``max_new_tokens``); a value
    the user set explicitly wins.
    """

    name: str
    multi_step: bool
    system_prompt: str | None
    reward_file: Path
    judge_rubric: str | None
    warm_start_target: float | None
    warm_start_steps: int
    run_defaults: Mapping[str, Any]

    def train_examples(self, seed: int) -> list[Example]:
        """The train split, shuffled or drawn with ``seed``."""
        ...

    def eval_examples(self) -> list[Example]:
        """The fixed held-out split (the same for every seed)."""
        ...

    def sft_pairs(self, seed: int) -> list[tuple[str, str]]:
        """(context, completion) text pairs the tiny policy is warm-started on."""
        ...


@runtime_checkable
class MultiStepScenario(Scenario, Protocol):
    """A scenario whose trajectories are episodes in an environment.

    max_turns: assistant turns at most per episode. make_env: a fresh
    environment for one example (it seeds itself from the example, so every
    episode of a group starts from the same state).
    """

    max_turns: int

    def make_env(self, example: Example) -> Environment:
        """A fresh environment for ``example``."""
        ...


class UnknownScenarioError(ValueError):
    """Raised by :func:`get_scenario` for a name that is not in SCENARIOS."""


def get_scenario(name: str | Mapping[str, Any]) -> Scenario:
    """Return the scenario called ``name``, or the user task it refers to.

    A task reference is a task.toml (or its folder), ``reasoning-gym:NAME``,
    ``verifiers:MODULE`` or a table of task keys (``scenarios.task_file``).

    Raises:
        UnknownScenarioError: ``name`` is neither one of :data:`SCENARIOS`
            nor a task reference; the message lists the known names.
        scenarios.task_file.TaskError: a task that cannot be loaded.
    """
    if not isinstance(name, str) or _is_task(name):
        from rlab.scenarios.task_file import load_task

        return load_task(name)
    if name not in SCENARIOS:
        known = ", ".join(SCENARIOS)
        raise UnknownScenarioError(f"unknown scenario {name!r}; choose one of: {known} "
                                   "(or --task PATH for your own task)")
    return importlib.import_module(f"{__name__}.{name}").SCENARIO


def _is_task(name: str) -> bool:
    return name not in SCENARIOS and (":" in name or name.endswith(".toml") or Path(name).exists())


def load_scenario(name: str, task: str | Mapping[str, Any] | None = None) -> Scenario:
    """A run's scenario: its ``task`` (always read as a task, so a missing
    task.toml is named as such) when given, else :func:`get_scenario` of ``name``.

    Raises:
        UnknownScenarioError: no scenario ``name``.
        scenarios.task_file.TaskError: the task cannot be loaded.
    """
    if task is None:
        return get_scenario(name)
    from rlab.scenarios.task_file import load_task

    return load_task(task)
