"""The verifiers shape's rubric: the last guess is the secret.

``completion`` is the conversation rollout.py returns, as OpenAI messages: the system prompt,
the question, then each guess and the environment's answer ("higher", "lower", "correct").
The environment's own Rubric (``solved``, the same check) comes back as the rollout's reward
and counts as one more reward component; ``correct`` here is what says solved.
"""

import re


def correct(example, completion):
    """1.0 when the last assistant message's number is the secret (the env may not have answered a last guess)."""
    said = [m for m in completion if m.get("role") == "assistant"]
    guess = re.search(r"-?\d+", (said[-1].get("content") or "") if said else "")
    if guess is None:
        return {"reward": 0.0, "details": {"parse_status": "no_number" if said else "no_answer"}}
    return {"reward": float(guess.group() == str(example["answer"])), "details": {"parse_status": "ok"}}


WEIGHTS = {"correct": 1.0}
