"""Rubric of the arithmetic scenario: exact two-digit addition.

Edit this file (in the TUI with ``e``, or in any editor) to change how
rollouts are rewarded. Each reward function follows the scorer contract
``score(example, completion) -> {"reward": float, "details": dict}``;
``WEIGHTS`` names the functions of the rubric and their weights.
"""

import re

_ANSWER = re.compile(r"^\s*(-?\d+)\s*$")


def correct(example, completion):
    """1.0 when the completion is exactly the sum, else 0.0.

    details: ``parse_status`` is ``ok`` (right answer), ``wrong`` (a number,
    but not the sum), ``empty`` (nothing but whitespace) or ``malformed``
    (not a single integer); ``parsed`` is the integer read, or None.
    """
    text = completion.strip()
    if not text:
        return {"reward": 0.0, "details": {"parse_status": "empty", "parsed": None}}
    match = _ANSWER.match(text)
    if match is None:
        return {"reward": 0.0, "details": {"parse_status": "malformed", "parsed": None}}
    parsed = int(match.group(1))
    ok = parsed == int(example["answer"])
    return {
        "reward": 1.0 if ok else 0.0,
        "details": {"parse_status": "ok" if ok else "wrong", "parsed": parsed},
    }


WEIGHTS = {"correct": 1.0}
