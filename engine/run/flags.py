"""How a run option is named on the command line, and how a refused value reads.

Every ``RunConfig`` field is a ``--flag`` (``engine.cli``), so an error of
pydantic's is reported by the flag the user typed, as one line. Light (no
RunConfig import): ``rlab runs`` and the other commands that load no model
import it at start-up.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from rlab.engine.validation import Problem, one_line


FLAG_NAMES = {"alerts": "--alert", "ks": "--k"}
"""Flags named otherwise than their field (dest -> flag): one threshold per
``--alert NAME=VALUE``, as README and ``rlab watch --alert`` say it; ``rlab
eval --k`` for LoopSettings' ``ks``."""


def flag(dest: str) -> str:
    """The flag of a config path: ``max_steps`` -> ``--max-steps``,
    ``judge.model`` -> ``--judge-model`` (or its :data:`FLAG_NAMES` name)."""
    return FLAG_NAMES.get(dest) or "--" + dest.replace(".", "-").replace("_", "-")


def assignments(words: Iterable[str], *, form: str = "NAME=VALUE", example: str) -> dict[str, str]:
    """``NAME=VALUE`` words as name -> value, both stripped, later words winning: the one
    parser of ``--alert NAME=VALUE``, ``rlab watch --alert`` and ``rlab set KEY=VALUE``.

    Raises:
        ValueError: a word without ``=`` or a name: ``'WORD': give FORM, e.g. EXAMPLE``.
    """
    out = {}
    for word in words:
        name, sep, value = word.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"{word!r}: give {form}, e.g. {example}")
        out[name.strip()] = value.strip()
    return out


def validation_message(err: ValidationError, given: dict[str, Any] | None = None) -> str:
    """pydantic's errors as ``--flag VALUE: rule`` parts joined by ``; `` (``given``: the
    values typed, to show beside their flag)."""
    def describe(problem: Problem) -> str:
        fields = list(problem.fields)
        if not fields or fields[0] == "alerts":  # the message names the flags itself
            return problem.rule
        rule = problem.rule
        if rule == "required" and len(fields) > 1:
            rule = f"required with the other --{fields[0]}-* options"
        value = _lookup(given or {}, fields[:2])
        shown = "" if value is None else " " + (",".join(map(str, value)) if isinstance(value, list)
                                                   else _shown_value(str(value)))
        return f"{flag('.'.join(fields[:2]))}{shown}: {rule}"

    return one_line(err, describe)


def _lookup(given: dict[str, Any], path: list[str]) -> Any:
    value: Any = given
    for part in path:
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _shown_value(text: str) -> str:
    """A value as an error line shows it: quoted (``repr``) when it is empty or would break
    the line (a newline in a name must not split the one error line)."""
    return repr(text) if not text or not text.isprintable() else text
