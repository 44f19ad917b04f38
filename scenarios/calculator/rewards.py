"""Rubric of the calculator scenario: is the final answer the exact result?

Edit this file (in the TUI with ``e``, or in any editor) to change how
episodes are rewarded. ``completion`` is the whole conversation as OpenAI
messages: the assistant's turns (with their ``tool_calls``), the ``tool``
results, and the final answer (the last assistant message, which makes no
call). ``WEIGHTS`` names the functions of the rubric.
"""

import re

from rlab.engine.rewards.helpers import tool_errors  # minus each failed call, on the turn that made it

_NUMBER = re.compile(r"-?\d+")


def _final_answer(completion):
    """The last assistant message's text when it makes no call (the answer), else None."""
    said = [m for m in completion if m["role"] == "assistant"]
    if not said or said[-1].get("tool_calls"):
        return None
    return said[-1]["content"]


def correct(example, completion):
    """1.0 when the final answer's last integer is the exact result, else 0.0.

    details: ``parse_status`` is ``ok`` (an integer answered), ``no_number``
    (an answer without one) or ``no_answer`` (the episode ended on a call:
    the turn limit came first).
    """
    answer = _final_answer(completion)
    if answer is None:
        return {"reward": 0.0, "details": {"parse_status": "no_answer"}}
    numbers = _NUMBER.findall(answer)
    if not numbers:
        return {"reward": 0.0, "details": {"parse_status": "no_number"}}
    return {"reward": float(numbers[-1] == str(example["answer"])), "details": {"parse_status": "ok"}}


# A failed call (malformed, unknown tool, bad arguments) costs a tenth of a right answer.
WEIGHTS = {"correct": 1.0, "tool_errors": 0.1}
