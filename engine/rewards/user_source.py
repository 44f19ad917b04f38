"""Run a user's Python source (a reward file, a tools file) as a fresh module.

Both kinds of user code load the same way: the text is compiled under the
file's name (so tracebacks and messages carry its name and line numbers),
registered with ``linecache`` (so they show *this* version's lines even when
the file on disk has changed since) and executed in a new module that is in
``sys.modules`` only while its body runs (dataclasses and typing look it up
there; two versions never collide). What goes wrong is a
:class:`~rlab.engine.rewards.rubric_errors.RubricError` naming the line.
"""

from __future__ import annotations

import hashlib
import linecache
import sys
import types
from pathlib import Path

from rlab.engine.rewards.rubric_errors import RubricError, line_of


def read_source(path_or_source: str | Path, filename: str) -> tuple[str, str]:
    """(source text, the name to compile it under) of a file path or a source text.

    Raises:
        ValueError: a ``str`` that looks like a file path (pass a Path).
        OSError: a path that cannot be read.
    """
    if isinstance(path_or_source, str):
        if "\n" not in path_or_source and path_or_source.strip().endswith(".py"):
            raise ValueError(
                f"got the str {path_or_source!r}, which looks like a file path; "
                "pass pathlib.Path(...) to load a file (a str is taken as the source text)"
            )
        return path_or_source, filename
    path = Path(path_or_source)
    return path.read_text(encoding="utf-8"), str(path)


def run_source(source: str, code_name: str, prefix: str) -> types.ModuleType:
    """Execute ``source`` as a fresh module compiled under ``code_name``.

    Args:
        source: the file's text.
        code_name: the name tracebacks show (the file's path).
        prefix: the module name's start (``_rubric``, ``_tools``).

    Returns:
        The executed module (no longer in ``sys.modules``).

    Raises:
        RubricError: it does not compile (``kind="syntax"``), an import
            fails (``"import"``) or it raises while loading (``"exception"``);
            the message names the file's line.
    """
    display = Path(code_name).name
    linecache.cache[code_name] = (len(source), None, source.splitlines(True), code_name)
    try:
        code = compile(source, code_name, "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise _syntax_error(exc, display) from None
    name = f"{prefix}_{Path(display).stem}_{hashlib.sha256(source.encode()).hexdigest()[:12]}"
    module = types.ModuleType(name)
    module.__file__ = code_name
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)
    except ImportError as exc:
        line = line_of(exc.__traceback__, code_name)
        raise RubricError(f"ImportError in {display} line {line}: {exc}", kind="import", lineno=line) from None
    except (Exception, SystemExit) as exc:  # sys.exit() in user code must not end the run
        line = line_of(exc.__traceback__, code_name)
        raise RubricError(f"{type(exc).__name__} in {display} line {line} while loading: {exc}",
                          kind="exception", lineno=line) from None
    finally:
        sys.modules.pop(name, None)
    return module


def _syntax_error(exc: SyntaxError, display: str) -> RubricError:
    """RubricError for a SyntaxError: the line, the message, the text and a caret."""
    message = f"SyntaxError in {display} line {exc.lineno}: {exc.msg}"
    text = (exc.text or "").rstrip("\n")
    if text.strip():
        indent = len(text) - len(text.lstrip())
        caret = " " * max(0, (exc.offset or 1) - 1 - indent) + "^"
        message += f"\n    {text.strip()}\n    {caret}"
    return RubricError(message, kind="syntax", lineno=exc.lineno)
