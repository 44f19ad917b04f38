"""The ART shape's rubric: the sum, read from the conversation rollout.py returns.

``completion`` is that conversation as OpenAI messages: the system prompt, the question,
the assistant's turns with their ``tool_calls``, the ``tool`` results, the final answer.
ART's own ``trajectory.reward`` (the same check, made inside the rollout) comes back as the
rollout's reward and counts as one more reward component; ``correct`` here is what says solved.
"""

import re


def correct(example, completion):
    """1.0 when the final answer (the last assistant message, which makes no call) ends with the sum."""
    said = [m for m in completion if m.get("role") == "assistant"]
    if not said or said[-1].get("tool_calls"):
        return {"reward": 0.0, "details": {"parse_status": "no_answer"}}
    numbers = re.findall(r"-?\d+", said[-1].get("content") or "")
    ok = bool(numbers) and numbers[-1] == str(example["answer"])
    return {"reward": float(ok), "details": {"parse_status": "ok" if numbers else "no_number"}}


WEIGHTS = {"correct": 1.0}
