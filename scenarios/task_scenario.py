"""A user task as a scenario: the type every task loader builds, and what they share.

``scenarios.task_file`` (task.toml), ``scenarios.third_party`` (reasoning-gym,
verifiers) and ``scenarios.task_env`` (a task's own environment class) all
build or feed a :class:`TaskScenario`; this module holds it with the error
type and the helpers they share, so none of them imports another in a circle.
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rlab.scenarios.base import ScenarioBase
from rlab.store.errors import UsageError

#: Seed of the held-out split taken from train when a task has no ``eval``.
HELD_OUT_SEED = 20250521
HELD_OUT_FRACTION = 0.1


class TaskError(UsageError):
    """A task that cannot be loaded; the message names the key, file or column and the fix."""


@dataclass(frozen=True, kw_only=True)
class TaskScenario(ScenarioBase):
    """A user task as a scenario (see ``engine.types.Scenario``); the fields a
    task shares with every scenario are :class:`ScenarioBase`'s.

    ``dataset_info`` goes into the run's manifest: the data files, row
    counts and how the held-out split was made.
    """

    train: list[dict[str, Any]]
    eval: list[dict[str, Any]]
    dataset_info: dict[str, Any]
    max_new_tokens: int | None = None
    max_turns: int = 8
    env_factory: Callable[[dict[str, Any]], Any] | None = None
    # A user's own agent that plays the rollouts (task.toml's `agent`, engine.agent).
    agent_file: Path | None = None
    # The tiny policy's warm start on a user task stops early, at the arithmetic recipe's target.
    warm_start_target: float | None = 0.4
    # Derived from the fields above (__post_init__), so a copy made with
    # dataclasses.replace cannot disagree with them.
    multi_step: bool = field(init=False, default=False)
    run_defaults: dict[str, Any] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        _derive(self, multi_step=self.env_factory is not None, run_defaults=self._own_run_defaults())

    def _own_run_defaults(self) -> dict[str, Any]:
        """The task's own ``max_new_tokens`` and ``agent``, when its task.toml sets them."""
        return ({} if self.max_new_tokens is None else {"max_new_tokens": self.max_new_tokens}) | (
            {} if self.agent_file is None else {"agent": str(self.agent_file)})

    def train_examples(self, seed: int) -> list[dict[str, Any]]:
        """The train split, shuffled with ``seed``."""
        examples = list(self.train)
        random.Random(seed).shuffle(examples)
        return examples

    def eval_examples(self) -> list[dict[str, Any]]:
        """The held-out split (the ``eval`` file, or the seeded 10 % of train)."""
        return list(self.eval)

    def make_env(self, example: dict[str, Any]):
        """A fresh environment for one episode of ``example`` (multi-step tasks)."""
        if self.env_factory is None:
            raise TaskError(f"task {self.name!r} has no env; add env = \"env.py:ClassName\" to its task.toml")
        return self.env_factory(example)

    def sft_pairs(self, seed: int) -> list[tuple[str, str]]:
        """(prompt text, answer) pairs of the train split: the tiny policy's warm start.

        Raises:
            TaskError: the task is multi-step or has no answers; pass --model.
        """
        if self.multi_step or not any(str(ex["answer"]) for ex in self.train):
            raise TaskError(f"task {self.name!r}: the built-in tiny policy warm-starts on the answers of "
                            "a single-turn task; pass --model PATH (or --model smollm2-135m)")
        head = self.system_prompt or ""
        return [(head + _prompt_text(ex["prompt"]), str(ex["answer"])) for ex in self.train_examples(seed)]


@dataclass(frozen=True, kw_only=True)
class ToolTaskScenario(TaskScenario):
    """A user task whose episodes call tools (``tools = "tools.py"`` in task.toml):
    a ``engine.types.ToolScenario``. ``transcripts`` are the tiny policy's warm-start
    conversations (a ``transcripts`` file's rows), empty when the task has none;
    ``demonstration_transcripts`` a real model's (a ``demonstrations`` file's rows),
    empty when it has none (the transcripts stand in)."""

    tools_file: Path = Path("tools.py")
    transcripts: list[list[dict[str, Any]]] = field(default_factory=list)
    demonstration_transcripts: list[list[dict[str, Any]]] = field(default_factory=list)
    # Calls take room: a turn of two calls is ~250 characters for the character-level tiny policy.
    tiny_context_tokens: int | None = 512

    def __post_init__(self) -> None:
        super().__post_init__()
        _derive(self, multi_step=True)  # its tools are its environment

    def sft_transcripts(self, seed: int) -> list[list[dict[str, Any]]]:
        """The task's warm-start conversations, shuffled with ``seed``.

        Raises:
            TaskError: the task has none; give it a transcripts file, or pass --model.
        """
        if not self.transcripts:
            raise TaskError(f"task {self.name!r}: the built-in tiny policy warm-starts on a tool task's "
                            "transcripts; add transcripts = \"transcripts.jsonl\" (rows with a messages column) "
                            "to its task.toml, or pass --model PATH (or --model smollm2-135m)")
        out = list(self.transcripts)
        random.Random(seed).shuffle(out)
        return out

    def demonstrations(self, seed: int) -> list[list[dict[str, Any]]]:
        """A real model's warm-start conversations: the ``demonstrations`` file's, else the
        transcripts', shuffled with ``seed``; empty when the task has neither."""
        out = list(self.demonstration_transcripts or self.transcripts)
        random.Random(seed).shuffle(out)
        return out


def _derive(task: TaskScenario, **values: Any) -> None:
    """Set a frozen task's derived fields (object.__setattr__: the frozen dataclass's own way)."""
    for name, value in values.items():
        object.__setattr__(task, name, value)


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, list):
        return "".join(str(m.get("content", "")) for m in prompt)
    return str(prompt)


def held_out_split(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train, held-out): a seeded 10 % of ``rows`` (at least one row) held out."""
    if len(rows) < 2:
        raise TaskError(f"train has {len(rows)} row(s): too few to hold 10 % out; add rows or an eval file")
    order = list(range(len(rows)))
    random.Random(HELD_OUT_SEED).shuffle(order)
    n_eval = max(1, round(HELD_OUT_FRACTION * len(rows)))
    held = set(order[:n_eval])
    return [r for i, r in enumerate(rows) if i not in held], [r for i, r in enumerate(rows) if i in held]


def state_key_of(value: Any) -> Hashable:
    """A state key as the engine needs it: hashable (lists become tuples)."""
    if isinstance(value, list):
        return tuple(state_key_of(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, state_key_of(v)) for k, v in value.items()))
    return value
