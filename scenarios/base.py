"""The one scenario base: every field a scenario has, with the defaults most take.

Built-in scenarios and user tasks (``scenarios.task_scenario.TaskScenario``)
both subclass :class:`ScenarioBase`, so each field is declared here once and a
subclass states only what differs from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ScenarioBase:
    """The :class:`rlab.engine.types.Scenario` fields (that protocol says what
    each means), with the defaults most scenarios take: single-turn, no system
    prompt, the judge's default rubric, solved at 1.0, a warm start of 4,000
    supervised steps with no early stop, the tiny policy's default context, no
    run defaults. A scenario subclasses it, states its name and reward file,
    and only what differs."""

    name: str
    reward_file: Path
    multi_step: bool = False
    system_prompt: str | None = None
    judge_rubric: str | None = None
    success: str | None = None
    success_threshold: float = 1.0
    warm_start_target: float | None = None
    warm_start_steps: int = 4000
    # None: the tiny policy's default context (engine.policy.tiny.CONTEXT_TOKENS);
    # a scenario whose longest episode needs more room asks for it here.
    tiny_context_tokens: int | None = None
    run_defaults: dict[str, Any] = field(default_factory=dict)

    def demonstrations(self, seed: int) -> list[list[dict[str, Any]]]:
        """A real model's warm-start conversations (``engine.types.ToolScenario``): none unless a
        tool scenario declares them."""
        return []


#: The base's first name, from when only built-in scenarios subclassed it; kept for their imports.
BuiltinScenario = ScenarioBase
