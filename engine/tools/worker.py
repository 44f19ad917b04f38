"""The child process that runs a task's tools: loads the tools file, calls a tool on request.

Run as ``python -P -m rlab.engine.tools.worker`` by
``engine.tools.process.ToolProcess`` through the reward child's machinery
(``engine.rewards.child.UserCodeProcess``: memory cap, scratch directory,
its output scrubbed and bounded on the way to the engine's log). One JSON
request per line on stdin, one JSON answer per line on a private copy of
stdout. Each request carries an ``id`` and its answer echoes it: tool code
can write to that private copy (it is an open file descriptor like any
other), and the parent replaces a process whose next line is not the answer
it waits for, so a forged line costs one call, not every call after it.
Two kinds:

- ``{"kind": "load", "source", "filename"}``: the tools' JSON schemas, in
  OpenAI's function format, from their signatures and docstrings
  (``transformers.utils.get_json_schema``). Answer ``{"tools": [...]}`` or
  ``{"failure": message}``.
- ``{"kind": "call", "source", "filename", "name", "arguments", "timeout_s",
  "max_chars"}``: call one tool. Arguments are checked against the
  function's type hints (``pydantic.validate_call``, lax: ``"3"`` is an int
  3) before it runs; it runs under the per-call limit of
  ``engine.rewards.time_limits``. Answer ``{"result", "error", "kind",
  "seconds", "hung"}``: ``result`` is the return value as text (a str as it
  is, anything else as JSON, converted under the same limit: a ``__str__``
  is tool code too), ``error`` None or what the policy is told, ``kind``
  which failure that is (``engine.types.ToolErrorKind``). ``hung`` says the
  call ran past its limit and left a thread here: the parent replaces this
  process.

A tool's return value or printed output that holds a credential
(``store.secrets``) is an error: the result is withheld, what it printed
goes to the log scrubbed.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import io
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from rlab.engine.rewards.reply_pipe import serve
from rlab.engine.rewards.rubric_errors import RubricError
from rlab.engine.rewards.time_limits import Ran, run_in_order
from rlab.engine.rewards.user_source import run_source
from rlab.engine.types import ToolErrorKind
from rlab.store.limits import cap_text
from rlab.store.secrets import scrub_text, secret_env_values


#: How the errors the policy caused begin.
UNKNOWN_TOOL, BAD_ARGUMENTS = "no tool named", "bad arguments for"
#: The kinds of error the policy caused (its turn is then ``invalid``: engine.tools.episode).
POLICY_ERRORS: frozenset[ToolErrorKind] = frozenset({"unknown_tool", "bad_arguments"})


class ToolsFileError(ValueError):
    """A tools file that cannot be used: it does not load, defines no tool, a tool has no
    schema, or no call could use it (see :func:`load_tools`)."""


def load_tools(source: str, filename: str) -> dict[str, Callable[..., Any]]:
    """The tools of a tools file by name: ``TOOLS`` (a list of functions) if it defines
    one, else every public function it defines.

    Raises:
        ToolsFileError: the file does not load or defines no tool; TOOLS lists
            something that is not a function; two tools share a name; a tool
            takes arguments no call can pass.
    """
    base = os.path.basename(filename)
    try:
        module = run_source(source, filename, "_tools")
    except RubricError as err:
        raise ToolsFileError(str(err)) from None
    listed = getattr(module, "TOOLS", None)
    if listed is not None:
        functions = _listed(listed, base)
    else:
        functions = [f for n, f in vars(module).items()
                     if inspect.isfunction(f) and not n.startswith("_") and f.__module__ == module.__name__]
    if not functions:
        raise ToolsFileError(f"{base} defines no tool: write a typed function with a "
                             "docstring (its Args: section describes each argument), or list them in TOOLS")
    tools: dict[str, Callable[..., Any]] = {}
    for fn in functions:
        _check_parameters(fn, base)
        if tools.setdefault(fn.__name__, fn) is not fn:  # the same function twice (an alias) is one tool
            raise ToolsFileError(f"two tools in {base} are named {fn.__name__} (a tool's name is its function's "
                                 "__name__): rename one, or the policy could call only one of them")
    return tools


def _listed(listed: Any, base: str) -> list[Callable[..., Any]]:
    """The entries of ``TOOLS``.

    Raises:
        ToolsFileError: it is not a list, or an entry is not a function (a
            ``functools.partial`` or a callable object has no name and
            signature of its own to offer the policy).
    """
    if not isinstance(listed, (list, tuple)):
        raise ToolsFileError(f"TOOLS in {base} must be a list of functions")
    for k, fn in enumerate(listed):
        if not (inspect.isfunction(fn) or inspect.ismethod(fn)):
            raise ToolsFileError(f"TOOLS[{k}] in {base} is {_shown(fn)}, not a plain function: TOOLS entries must "
                                 "be functions defined with def (wrap a partial or a callable object in one, "
                                 "with type hints and a docstring)")
    return list(listed)


def _check_parameters(fn: Callable[..., Any], base: str) -> None:
    """Raises ToolsFileError: ``fn`` takes ``*args``, ``**kwargs`` or positional-only
    parameters, which no call (one JSON object of named arguments) can fill."""
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            star = "*" if p.kind == p.VAR_POSITIONAL else "**"
            raise ToolsFileError(f"tool {fn.__name__} in {base} takes {star}{p.name}: a call passes named arguments "
                                 "(one JSON object), which cannot fill it; name each argument instead")
        if p.kind == p.POSITIONAL_ONLY:
            raise ToolsFileError(f"tool {fn.__name__} in {base} takes {p.name} positional-only (before /): a call "
                                 "passes named arguments; remove the /")


def _shown(entry: Any) -> str:
    """What a TOOLS entry is, in words (no ``repr``: user code's could fail, and its
    module's name is the loader's, not the file's)."""
    if isinstance(entry, functools.partial):
        return f"functools.partial({getattr(entry.func, '__name__', 'a callable')}, ...)"
    return f"an object of class {type(entry).__qualname__}"


def schemas(tools: dict[str, Callable[..., Any]], filename: str) -> list[dict[str, Any]]:
    """Each tool's JSON schema (OpenAI's function format, transformers' ``get_json_schema``).

    Raises:
        ToolsFileError: a tool without type hints or a docstring that describes its arguments.
    """
    from transformers.utils import get_json_schema  # ~0.9 s: paid once per run, not per call

    out = []
    for name, fn in tools.items():
        try:
            out.append(get_json_schema(fn))
        except Exception as err:  # noqa: BLE001 - transformers raises its own parsing exceptions
            raise ToolsFileError(f"tool {name} in {os.path.basename(filename)}: {err} (each tool needs type "
                                 "hints and a docstring whose Args: section describes every argument)") from None
    return out


@functools.cache
def _checked(source: str, filename: str) -> dict[str, Callable[..., Any]]:
    """The file's tools, each wrapped to check its arguments against its type hints.

    Raises:
        ToolsFileError: see :func:`load_tools`; a type hint pydantic cannot check.
    """
    from pydantic import validate_call

    checked = {}
    for name, fn in load_tools(source, filename).items():
        try:
            checked[name] = validate_call(fn)
        except Exception as err:  # noqa: BLE001 - pydantic's schema errors have no common base of their own
            raise ToolsFileError(f"tool {name} in {os.path.basename(filename)}: its arguments cannot be checked "
                                 f"against its type hints: {_described(err)}") from None
    return checked


def call(request: dict[str, Any]) -> dict[str, Any]:
    """The answer to a ``call`` request (see the module doc)."""
    try:
        tools = _checked(request["source"], request["filename"])
    except ToolsFileError as err:
        return _answer(error=f"the tools file does not load: {err}", kind="not_loaded")
    name = request["name"]
    if name not in tools:
        return _answer(error=f"{UNKNOWN_TOOL} {name!r}; the tools: {', '.join(tools)}", kind="unknown_tool")
    printed = io.StringIO()
    started = time.monotonic()
    ran, converting = _timed(lambda: tools[name](**request["arguments"]), printed, request), False
    if not ran.hung and ran.answers[0][0] == "ok":
        value = ran.answers[0][1]
        ran, converting = _timed(lambda: _as_text(value), printed, request), True
    seconds = time.monotonic() - started
    _log(name, printed.getvalue())
    if ran.hung:
        return _answer(error=f"{name} did not return within {request['timeout_s']:g} s", kind="timeout",
                       seconds=seconds, hung=True)
    status, value = ran.answers[0]
    if status == "raised" and converting:
        return _answer(error=f"{name} returned a value that cannot be written as JSON: {_described(value)}",
                       kind="unserialisable", seconds=seconds)
    if status == "raised":
        return _failure(name, value, seconds)
    return _result(name, value, printed.getvalue(), request["max_chars"], seconds)


def _timed(fn: Callable[[], Any], printed: io.StringIO, request: dict[str, Any]) -> Ran:
    """``fn()`` under the call's time limit, what it prints kept in ``printed``."""

    def run() -> Any:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            return fn()

    return run_in_order([run], request["timeout_s"], request["filename"])


def _as_text(value: Any) -> str:
    """A tool's return value as the policy reads it: a str as it is, anything else as JSON.

    Raises:
        Exception: whatever its conversion raises (a circular list, an int
            over Python's int-string limit, a ``__str__`` that fails).
    """
    if isinstance(value, str):
        return str.__str__(value)  # a plain str: a subclass's own methods would run outside the limit
    return json.dumps(value, ensure_ascii=False, default=str)


def _described(exc: BaseException) -> str:
    """``Type: message``, also for an exception whose ``str()`` fails (user code's)."""
    try:
        message = str(exc)
    except Exception:  # noqa: BLE001 - any failure of user code's __str__
        message = "(str() of it failed)"
    return f"{type(exc).__name__}: {message}"


def _failure(name: str, exc: BaseException, seconds: float) -> dict[str, Any]:
    from pydantic import ValidationError

    from rlab.engine.validation import one_line

    if isinstance(exc, ValidationError):
        # the policy reads pydantic's own words, as tool frameworks show a model, each at its argument
        problems = one_line(exc, lambda problem: f"{problem.key or 'arguments'}: {problem.message}")
        return _answer(error=f"{BAD_ARGUMENTS} {name}: {problems}", kind="bad_arguments", seconds=seconds)
    return _answer(error=f"{name} raised {_described(exc)}", kind="raised", seconds=seconds)


def _result(name: str, text: str, printed: str, max_chars: int, seconds: float) -> dict[str, Any]:
    if len(text) > max_chars:
        return _answer(error=f"{name} returned {len(text):,} characters, over the limit of {max_chars:,}; "
                             "return less (the part asked for, or a summary)", kind="too_long", seconds=seconds)
    secrets = secret_env_values()
    if scrub_text(text, secrets) != text or scrub_text(printed, secrets) != printed:
        return _answer(error=f"{name}'s output held a credential, so it was withheld; fix the tool",
                       kind="credential", seconds=seconds)
    return _answer(result=text, seconds=seconds)


def _answer(*, result: str = "", error: str | None = None, kind: ToolErrorKind | None = None,
            seconds: float = 0.0, hung: bool = False) -> dict[str, Any]:
    return {"result": result, "error": None if error is None else cap_text(error), "kind": kind,
            "seconds": seconds, "hung": hung}


def _log(name: str, printed: str) -> None:
    """What a tool printed goes to the log (the parent scrubs and bounds it), one line to say whose."""
    if printed:
        sys.stderr.write(f"[tool {name} printed]\n{printed}{'' if printed.endswith(chr(10)) else chr(10)}")
        sys.stderr.flush()


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """The reply to one request of either kind, with the request's ``id``."""
    loading = request["kind"] == "load"
    try:
        reply = _load(request) if loading else call(request)
    except Exception as err:  # noqa: BLE001 - a failure outside a tool's call is that request's, not the process's
        message = f"the tool worker failed: {_described(err)}"
        reply = {"failure": message} if loading else _answer(error=message, kind="internal")
    return {**reply, "id": request.get("id")}


def _load(request: dict[str, Any]) -> dict[str, Any]:
    try:
        return {"tools": schemas(load_tools(request["source"], request["filename"]), request["filename"])}
    except ToolsFileError as err:
        return {"failure": str(err)}


def main() -> None:
    """Serve requests until stdin closes (``engine.rewards.reply_pipe``)."""
    serve(answer)


if __name__ == "__main__":
    main()
