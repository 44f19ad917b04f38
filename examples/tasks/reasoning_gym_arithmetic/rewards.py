"""basic_arithmetic for a 135 M model: reasoning-gym's own score_answer, on the tagged answer or the last number.

SmolLM2-135M-Instruct almost never writes <answer> tags at first (0 of 32
completions did), so a tag-only scorer gives every group the same zero and
GRPO no signal. Here an untagged completion is scored on its last number, and
the tag is a small format bonus the policy can discover.
"""

import re

import reasoning_gym
from reasoning_gym.utils import extract_answer

_DATASET = reasoning_gym.create_dataset("basic_arithmetic", size=1, seed=0)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def correct(example, completion):
    """score_answer (0..1) of the tagged answer, else of the completion's last number."""
    tagged = extract_answer(completion)
    numbers = _NUMBER.findall(completion)
    answer = tagged if tagged is not None else (numbers[-1] if numbers else None)
    entry = {"question": example["prompt"], "answer": example["answer"], "metadata": example["metadata"]}
    status = "tagged" if tagged is not None else ("last_number" if answer is not None else "no_number")
    return {"reward": float(_DATASET.score_answer(answer, entry)), "details": {"parse_status": status,
                                                                             "extracted": answer}}


def answer_tag(completions, **kwargs):
    """TRL style: 1.0 for each completion that puts its answer inside <answer>...</answer>."""
    return [1.0 if extract_answer(c) is not None else 0.0 for c in completions]


WEIGHTS = {"correct": 1.0, "answer_tag": 0.1}
