"""The shop agent's rubric: the exact total, and a small cost for each failed call.

``completion`` is the whole conversation as OpenAI messages: the assistant's
turns with their ``tool_calls``, the ``tool`` results, and the final answer.
"""

import re

from rlab.engine.rewards.helpers import tool_errors  # minus each failed call, on the turn that made it


def correct(example, completion):
    """1.0 when the final answer (the last assistant message, which makes no call) ends with the total."""
    said = [m for m in completion if m["role"] == "assistant"]
    if not said or said[-1].get("tool_calls"):
        return {"reward": 0.0, "details": {"parse_status": "no_answer"}}
    numbers = re.findall(r"\d+", said[-1]["content"])
    ok = bool(numbers) and numbers[-1] == str(example["answer"])
    return {"reward": float(ok), "details": {"parse_status": "ok" if numbers else "no_number"}}


WEIGHTS = {"correct": 1.0, "tool_errors": 0.1}
