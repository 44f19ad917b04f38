"""The child process that runs a task's tools: loads the tools file, calls a tool on request.

Run as ``python -P -m rlab.engine.tools.worker`` by
``engine.tools.process.ToolProcess`` through the reward child's machinery
(``engine.rewards.child.UserCodeProcess``: memory cap, scratch directory,
its output scrubbed and bounded on the way to the engine's log). One JSON
request per line on stdin, one JSON answer per line on a private copy of
stdout. Two kinds:

- ``{"kind": "load", "source", "filename"}``: the tools' JSON schemas, in
  OpenAI's function format, from their signatures and docstrings
  (``transformers.utils.get_json_schema``). Answer ``{"tools": [...]}`` or
  ``{"failure": message}``.
- ``{"kind": "call", "source", "filename", "name", "arguments", "timeout_s",
  "max_chars"}``: call one tool. Arguments are checked against the
  function's type hints (``pydantic.validate_call``, lax: ``"3"`` is an int
  3) before it runs; it runs under the per-call limit of
  ``engine.rewards.time_limits``. Answer ``{"result", "error", "seconds",
  "hung"}``: ``result`` is the return value as text (a str as it is,
  anything else as JSON), ``error`` None or what the policy is told.
  ``hung`` says the call ran past its limit and left a thread here: the
  parent replaces this process.

A tool's return value or printed output that holds a credential
(``store.secrets``) is an error: the result is withheld, what it printed
goes to the log scrubbed.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from rlab.engine.rewards.rubric_errors import RubricError
from rlab.engine.rewards.time_limits import run_in_order
from rlab.engine.rewards.user_source import run_source
from rlab.store.limits import cap_text
from rlab.store.secrets import scrub_text, secret_env_values


#: How the errors the policy caused begin (the turn is then ``invalid``: engine.tools.episode).
UNKNOWN_TOOL, BAD_ARGUMENTS = "no tool named", "bad arguments for"


class ToolsFileError(ValueError):
    """A tools file that cannot be used: it does not load, defines no tool, or a tool has no schema."""


def load_tools(source: str, filename: str) -> dict[str, Callable[..., Any]]:
    """The tools of a tools file by name: ``TOOLS`` (a list of functions) if it defines
    one, else every public function it defines.

    Raises:
        ToolsFileError: the file does not load, or defines no tool.
    """
    try:
        module = run_source(source, filename, "_tools")
    except RubricError as err:
        raise ToolsFileError(str(err)) from None
    listed = getattr(module, "TOOLS", None)
    if listed is not None:
        if not isinstance(listed, (list, tuple)) or not all(callable(f) for f in listed):
            raise ToolsFileError(f"TOOLS in {os.path.basename(filename)} must be a list of functions")
        functions = list(listed)
    else:
        functions = [f for n, f in vars(module).items()
                     if callable(f) and not n.startswith("_") and getattr(f, "__module__", None) == module.__name__
                     and not isinstance(f, type)]
    if not functions:
        raise ToolsFileError(f"{os.path.basename(filename)} defines no tool: write a typed function with a "
                             "docstring (its Args: section describes each argument), or list them in TOOLS")
    return {f.__name__: f for f in functions}


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
    """The file's tools, each wrapped to check its arguments against its type hints."""
    from pydantic import validate_call

    return {name: validate_call(fn) for name, fn in load_tools(source, filename).items()}


def call(request: dict[str, Any]) -> dict[str, Any]:
    """The answer to a ``call`` request (see the module doc)."""
    try:
        tools = _checked(request["source"], request["filename"])
    except ToolsFileError as err:
        return _answer(error=f"the tools file does not load: {err}")
    name = request["name"]
    if name not in tools:
        return _answer(error=f"{UNKNOWN_TOOL} {name!r}; the tools: {', '.join(tools)}")
    printed = io.StringIO()

    def run() -> Any:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
            return tools[name](**request["arguments"])

    started = time.monotonic()
    ran = run_in_order([run], request["timeout_s"], request["filename"])
    seconds = time.monotonic() - started
    _log(name, printed.getvalue())
    if ran.hung:
        return _answer(error=f"{name} did not return within {request['timeout_s']:g} s", seconds=seconds, hung=True)
    status, value = ran.answers[0]
    if status == "raised":
        return _answer(error=_failure(name, value), seconds=seconds)
    return _result(name, value, printed.getvalue(), request["max_chars"], seconds)


def _failure(name: str, exc: BaseException) -> str:
    from pydantic import ValidationError

    if isinstance(exc, ValidationError):
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}"
                             for e in exc.errors(include_url=False))
        return f"{BAD_ARGUMENTS} {name}: {problems}"
    return f"{name} raised {type(exc).__name__}: {exc}"


def _result(name: str, value: Any, printed: str, max_chars: int, seconds: float) -> dict[str, Any]:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    if len(text) > max_chars:
        return _answer(error=f"{name} returned {len(text):,} characters, over the limit of {max_chars:,}; "
                             "return less (the part asked for, or a summary)", seconds=seconds)
    secrets = secret_env_values()
    if scrub_text(text, secrets) != text or scrub_text(printed, secrets) != printed:
        return _answer(error=f"{name}'s output held a credential, so it was withheld; fix the tool",
                       seconds=seconds)
    return _answer(result=text, seconds=seconds)


def _answer(*, result: str = "", error: str | None = None, seconds: float = 0.0, hung: bool = False) -> dict:
    return {"result": result, "error": None if error is None else cap_text(error), "seconds": seconds,
            "hung": hung}


def _log(name: str, printed: str) -> None:
    """What a tool printed goes to the log (the parent scrubs and bounds it), one line to say whose."""
    if printed:
        sys.stderr.write(f"[tool {name} printed]\n{printed}{'' if printed.endswith(chr(10)) else chr(10)}")
        sys.stderr.flush()


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """The reply to one request of either kind."""
    if request["kind"] == "load":
        try:
            return {"tools": schemas(load_tools(request["source"], request["filename"]), request["filename"])}
        except ToolsFileError as err:
            return {"failure": str(err)}
    return call(request)


def main() -> None:
    """Serve requests until stdin closes."""
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # tool code's prints must not corrupt the replies
    sys.stdout = sys.stderr
    for line in sys.stdin:
        replies.write(json.dumps(answer(json.loads(line)), default=repr) + "\n")
        replies.flush()
    os._exit(0)  # abandoned tool threads must not delay the exit


if __name__ == "__main__":
    main()
