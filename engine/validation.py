"""One line from a pydantic ``ValidationError``, for every option and file a user writes.

pydantic's report is a multi-line text with URLs; a user gets one
``rlab: error:`` line instead. :func:`problems` reads the errors once, in our
words (``must be`` for "Input should be", ``required`` for "Field
required"), and each caller names the place as its user typed it: a flag
(``engine.flags``), an ``--alert NAME=VALUE`` (``engine.config``), a task
file's key (``scenarios.task_file``). Part of the engine's public surface:
light (pydantic only), so scenarios import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pydantic import ValidationError


@dataclass(frozen=True)
class Problem:
    """One error of a ValidationError.

    ``loc``: pydantic's location (field names, list indices) from the
    model's root; ``kind``: pydantic's error type (``missing``,
    ``extra_forbidden``, ...); ``rule``: what the value breaks, in our words.
    """

    loc: tuple[str | int, ...]
    kind: str
    rule: str

    @property
    def fields(self) -> tuple[str, ...]:
        """The field names of ``loc`` (list indices left out)."""
        return tuple(part for part in self.loc if isinstance(part, str))


def problems(err: ValidationError) -> list[Problem]:
    """``err``'s errors as :class:`Problem` s, in pydantic's order."""
    return [Problem(tuple(e["loc"]), e["type"], _rule(e["msg"])) for e in err.errors(include_url=False)]


def one_line(err: ValidationError, describe: Callable[[Problem], str]) -> str:
    """``err`` as one line: each problem as ``describe`` names it, joined by ``; ``."""
    return "; ".join(describe(problem) for problem in problems(err))


def _rule(message: str) -> str:
    return (message.removeprefix("Value error, ").replace("Input should be", "must be")
            .replace("Field required", "required"))
