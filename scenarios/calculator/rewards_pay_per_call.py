"""A rubric with a tool-specific hole: it pays for every call, right answer or not.

The guided hack of the calculator scenario (README, "Your own agent"): a
policy trained on it learns to call tools until the turn limit instead of
answering, so its reward rises while its success (``correct``) falls; the
engine's ``tool_loop`` and ``hack`` alerts name it. ``rewards.py`` is the fix.
"""

from rlab.scenarios.calculator.rewards import correct  # noqa: F401  (the success function, as in rewards.py)


def calls(example, completion):
    """1.0 per tool call the episode made (the hole: nothing checks that it helped)."""
    made = sum(len(m.get("tool_calls") or []) for m in completion if m["role"] == "assistant")
    return {"reward": 1.0 * made, "details": {"calls": made}}


WEIGHTS = {"correct": 1.0, "calls": 1.0}
