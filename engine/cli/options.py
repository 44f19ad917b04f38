"""The run options, generated from :class:`RunConfig`, and the engine's command line.

Every field of ``RunConfig`` is one ``--flag`` (``max_steps`` ->
``--max-steps``), and every field of the nested :class:`JudgeSettings` one
``--judge-*`` flag, so the command line can never drift from the config:
the field's description is the help, its default is shown (and applied by
pydantic, not repeated here), ``Literal`` fields give choices, booleans are
``--x/--no-x`` and list or tuple fields take comma-separated values. Values
are handed to pydantic as the strings typed, so one validator (the
config's) checks them, and its errors are reported by flag
(``engine.run.flags.validation_message``).
"""

from __future__ import annotations

import argparse
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from rlab.engine.cli.errors import CliError
from rlab.engine.run.flags import assignments, flag, validation_message

if typing.TYPE_CHECKING:
    from rlab.engine.run.config import RunConfig

# RunConfig is imported inside the functions that need it: it pulls in the
# judge's openai client, which `rlab runs` must not pay for at start-up.


def nested_models() -> dict[str, type[BaseModel]]:
    """RunConfig fields holding a settings model: each of its fields is a
    ``--<field>-<name>`` flag; the model is built when any of them is given."""
    from rlab.engine.run.config import RunConfig

    return {name: _optional(info.annotation) for name, info in RunConfig.model_fields.items()
            if isinstance(_optional(info.annotation), type)
            and issubclass(_optional(info.annotation), BaseModel)}

EXTRA_FLAGS = {"judge.timeout_s": ("--judge-timeout",), "judge.use_cache": ("--judge-no-cache",),
               "alerts": ("--alerts",)}
"""Older flag names kept working beside the generated ones (dest -> flags);
a boolean's extra flag with ``-no-`` in it sets False."""

def _optional(annotation: Any) -> Any:
    """``X`` for ``X | None`` (the flag is simply left out for None)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",")]


class _NameValue(argparse.Action):
    """``--flag NAME=VALUE``, repeatable, collected into one dict (a dict field)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        try:
            given = assignments([str(values)], example=f"{option_string} length_drift=0.3")
        except ValueError as err:
            raise argparse.ArgumentError(self, str(err)) from None
        setattr(namespace, self.dest, dict(getattr(namespace, self.dest, None) or {}) | given)


def _help(info: FieldInfo, default_shown: bool = True) -> str:
    """The field's description (argparse's ``%`` escaped) and, if shown, its default."""
    text = (info.description or "").replace("%", "%%")
    if default_shown and info.default not in (None, [], ()) and not info.is_required():
        value = ",".join(map(str, info.default)) if isinstance(info.default, (list, tuple)) \
            else info.default
        text += f" (default: {value})"
    return text.strip()


def _add_field(group: argparse._ActionsContainer, dest: str, info: FieldInfo) -> None:
    kind = _optional(info.annotation)
    names = [flag(dest), *EXTRA_FLAGS.get(dest, ())]
    common: dict[str, Any] = {"dest": dest, "default": argparse.SUPPRESS}
    if kind is bool:
        group.add_argument(flag(dest), action=argparse.BooleanOptionalAction, help=_help(info), **common)
        for extra in names[1:]:
            negative = "-no-" in extra
            same = flag(dest).replace("--", "--no-", 1) if negative else flag(dest)
            group.add_argument(extra, action="store_false" if negative else "store_true",
                               help=f"same as {same}", **common)
        return
    origin = typing.get_origin(kind)
    if origin is Literal:
        group.add_argument(*names, choices=typing.get_args(kind), help=_help(info), **common)
    elif origin in (list, tuple):
        group.add_argument(*names, type=_comma_list, metavar="A,B", help=_help(info), **common)
    elif origin is dict:
        group.add_argument(*names, action=_NameValue, metavar="NAME=VALUE",
                           help=_help(info, default_shown=False) + " (repeatable)", **common)
    else:
        metavar = {int: "INT", float: "NUM", Path: "PATH"}.get(kind, dest.rsplit(".", 1)[-1].upper())
        group.add_argument(*names, metavar=metavar, help=_help(info), **common)


def add_run_options(parser: argparse.ArgumentParser, *, leave_out: tuple[str, ...] = ()) -> None:
    """Add one option per RunConfig field (and per nested settings field), but
    those in ``leave_out`` (``rlab fork`` takes ``fork_from`` as its argument).

    Options default to ``argparse.SUPPRESS``: the namespace holds only what
    was typed, and :func:`config_from_args` lets RunConfig fill the rest.
    """
    from rlab.engine.run.config import RunConfig

    nested = nested_models()
    for name, info in RunConfig.model_fields.items():
        if name not in nested and name not in leave_out:
            _add_field(parser, name, info)
    for name, model in nested.items():
        group = parser.add_argument_group(f"{name}: {(RunConfig.model_fields[name].description or '')}")
        for sub, info in model.model_fields.items():
            _add_field(group, f"{name}.{sub}", info)


def add_fork_arguments(parser: argparse.ArgumentParser) -> None:
    """``rlab fork``'s arguments: RUN@STEP, ``--headless`` and every run option a fork takes."""
    parser.add_argument("fork_from", metavar="RUN@STEP",
                        help="the run and its checkpoint: a checkpoint's step, best (held-out pass@1) or latest")
    parser.add_argument("--headless", action="store_true", help="no TUI; print progress and a JSON summary")
    add_run_options(parser, leave_out=("fork_from", "resume"))


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The RunConfig of the typed run options (others take RunConfig's defaults).

    Raises:
        CliError: a value breaks a rule; the message names the flag and the rule.
    """
    from rlab.engine.run.config import RunConfig

    nested = nested_models()
    given: dict[str, Any] = {}
    for dest, value in vars(args).items():
        head, _, sub = dest.partition(".")
        if sub and head in nested:
            given.setdefault(head, {})[sub] = value
        elif head in RunConfig.model_fields:
            given[head] = value
    from rlab.engine.run.run_config import merge_run_config

    given = merge_run_config(given)
    try:
        return RunConfig.model_validate(given)
    except ValidationError as err:
        raise CliError(validation_message(err, given)) from None


def engine_command(argv: list[str], *, db: Path | None = None, name: str | None = None) -> list[str]:
    """The engine's command line for run options ``argv`` (``--headless`` dropped), with
    ``--db db`` and ``--name name`` added when given and not among them: the one builder
    of it, for the TUI's run and its fork dialog.

    ``python -P -m rlab.engine``: -P keeps the working directory off ``sys.path``, so a
    user's files cannot shadow our modules.
    """
    argv = [a for a in argv if a != "--headless"]
    for option, value in (("--db", db), ("--name", name)):
        if value is not None and not any(a == option or a.startswith(option + "=") for a in argv):
            argv += [option, str(value)]
    return [sys.executable, "-P", "-m", "rlab.engine", *argv]
