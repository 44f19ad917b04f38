"""WEIGHTS in a reward file's text: found, read and rewritten without running the file.

The weights editor reads the literal ``WEIGHTS = {...}`` and writes new
weights back into the text, so the stored source (and its sha256) always
says which weights scored a trajectory; the loader
(``engine.rewards.rubric``) asks for the assignment's line for its messages.
"""

from __future__ import annotations

import ast
import json
import math
import numbers
from collections.abc import Mapping

from rlab.engine.rewards.rubric_errors import RubricError


def _weights_node(source: str) -> ast.Assign | ast.AnnAssign | None:
    """The last module-level ``WEIGHTS = ...`` assignment (the one in force), if any."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    found = None
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "WEIGHTS" for t in targets):
            found = node
    return found


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
    except SyntaxError:
        return False
    return True


def weights_line(source: str) -> int | None:
    """1-based line of the module-level ``WEIGHTS = ...`` assignment in force, or None."""
    node = _weights_node(source)
    return node.lineno if node is not None else None


def literal_weights(source: str) -> dict[str, float] | None:
    """Read ``WEIGHTS`` from a reward file's text without running it.

    Returns:
        name -> weight when WEIGHTS is a literal dict of numbers (e.g. for a
        weights editor), else None (missing, computed, or the file does not
        parse). Use ``engine.rewards.rubric.load_rubric`` to validate.
    """
    node = _weights_node(source)
    try:
        value = ast.literal_eval(node.value) if node is not None and node.value is not None else None
    except ValueError:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) for k, v in value.items()
    ):
        return None
    return {k: float(v) for k, v in value.items()}


def replace_weights(source: str, weights: Mapping[str, float]) -> str:
    """Rewrite the reward file's ``WEIGHTS`` assignment with new weights.

    Live weight changes go through the file, so the stored source (and its
    sha256) always says which weights scored a trajectory. Only the value of
    the last module-level ``WEIGHTS = ...`` changes; the rest of the text is
    kept byte for byte.

    Args:
        source: the reward file's text.
        weights: name -> weight (finite numbers), written in this order.

    Raises:
        RubricError: the source does not parse (``kind="weights"``); a
            weight is not a finite number. A file without WEIGHTS gets one
            appended.
    """
    for name, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, numbers.Real) or not math.isfinite(weight):
            raise RubricError(f"weight for {name!r} is {weight!r}; a weight must be a finite number", kind="weights")
    node = _weights_node(source)
    literal = "{" + ", ".join(f"{json.dumps(name)}: {float(w)!r}" for name, w in weights.items()) + "}"
    if node is None:
        if _parses(source):  # WEIGHTS is optional: the first weight edit adds it
            return source + ("" if source.endswith("\n") or not source else "\n") + f"\nWEIGHTS = {literal}\n"
        raise RubricError("the reward file does not parse; fix the file first", kind="weights")
    value = node.value
    # _weights_node only returns assignments with a value, and ast.parse fills every position
    assert value is not None and value.end_lineno is not None and value.end_col_offset is not None
    lines = source.splitlines(keepends=True)
    # ast offsets are in utf-8 bytes; slice bytes so non-ASCII text before them is safe
    start = sum(len(x.encode()) for x in lines[: value.lineno - 1]) + value.col_offset
    end = sum(len(x.encode()) for x in lines[: value.end_lineno - 1]) + value.end_col_offset
    data = source.encode()
    return (data[:start] + literal.encode() + data[end:]).decode()
