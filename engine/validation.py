"""One line from a pydantic ``ValidationError``, for every option and file a user writes.

pydantic's report is a multi-line text with URLs; a user gets one
``rlab: error:`` line instead. :func:`problems` reads the errors once, in our
words (``must be`` for "Input should be", ``required`` for "Field
required"), and each caller names the place as its user typed it: a flag
(``engine.run.flags``), an ``--alert NAME=VALUE`` (``engine.run.config``), a task
file's key (``scenarios.task_file``), a judge's answer, a run config's
alert thresholds in the TUI. The one reader a person's message is not for is
the policy: a tool's bad arguments keep pydantic's wording
(:attr:`Problem.message`), as tool frameworks show a model. Part of the
engine's public surface: light (pydantic only), so scenarios and the TUI
import it.
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
    ``extra_forbidden``, ...); ``rule``: what the value breaks, in our words;
    ``message``: pydantic's own words for it.
    """

    loc: tuple[str | int, ...]
    kind: str
    rule: str
    message: str

    @property
    def fields(self) -> tuple[str, ...]:
        """The field names of ``loc`` (list indices left out)."""
        return tuple(part for part in self.loc if isinstance(part, str))

    @property
    def key(self) -> str:
        """``loc`` as a dotted key (``scores.0.score``); "" for the model's root."""
        return ".".join(map(str, self.loc))


def problems(err: ValidationError) -> list[Problem]:
    """``err``'s errors as :class:`Problem` s, in pydantic's order."""
    return [Problem(tuple(e["loc"]), e["type"], _rule(e["msg"]), e["msg"]) for e in err.errors(include_url=False)]


def one_line(err: ValidationError, describe: Callable[[Problem], str], *, most: int | None = None) -> str:
    """``err`` as one line: each problem as ``describe`` names it, joined by ``; ``.

    ``most``: name at most this many problems and count the rest (``; and 7
    more``), where a value may break a rule once per entry of a long list.
    """
    found = problems(err)
    shown = found if most is None else found[:most]
    rest = len(found) - len(shown)
    return "; ".join([describe(problem) for problem in shown] + ([f"and {rest} more"] if rest else []))


def located(problem: Problem) -> str:
    """``key: rule`` (``scores.0.score: must be a valid number``), for a
    ``describe`` with nothing of its own to add; the root is ``value``."""
    return f"{problem.key or 'value'}: {problem.rule}"


def _rule(message: str) -> str:
    return (message.removeprefix("Value error, ").replace("Input should be", "must be")
            .replace("Field required", "required"))
