"""The fields every built-in scenario has, with the defaults most of them take."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class BuiltinScenario:
    """The :class:`rlab.engine.types.Scenario` fields (that protocol says what
    each means), with the defaults most built-in scenarios take: single-turn,
    no system prompt, the judge's default rubric, solved at 1.0, a warm start of
    4,000 supervised steps with no early stop, no run defaults. A scenario
    subclasses it, states its name and reward file, and only what differs."""

    name: str
    reward_file: Path
    multi_step: bool = False
    system_prompt: str | None = None
    judge_rubric: str | None = None
    success: str | None = None
    success_threshold: float = 1.0
    warm_start_target: float | None = None
    warm_start_steps: int = 4000
    run_defaults: dict[str, Any] = field(default_factory=dict)
