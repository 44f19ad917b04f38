"""The Agents SDK shape's rubric: the temperature the tool knows, read from the conversation.

``completion`` is the conversation rollout.py returns, as OpenAI messages: the agent's
instructions (system), the question, the assistant's turns with their ``tool_calls``, the
``tool`` results, the final answer. The agent returns no reward of its own.
"""

import re


def correct(example, completion):
    """1.0 when the final answer (the last assistant message, which makes no call) ends with the temperature."""
    said = [m for m in completion if m.get("role") == "assistant"]
    if not said or said[-1].get("tool_calls"):
        return {"reward": 0.0, "details": {"parse_status": "no_answer"}}
    numbers = re.findall(r"-?\d+", said[-1].get("content") or "")
    ok = bool(numbers) and numbers[-1] == str(example["answer"])
    return {"reward": float(ok), "details": {"parse_status": "ok" if numbers else "no_number"}}


WEIGHTS = {"correct": 1.0}
