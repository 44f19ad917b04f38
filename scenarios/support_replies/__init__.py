"""Replies to customer-support emails: a subjective scenario for a real judge.

The policy answers one email from a customer of Northwind Home (a fictional
online home-goods store) following the store policy in the system prompt.
There is no single right answer, so the intended reward is the RULER judge
(``engine.rewards.judge.ruler.RulerJudge``, with :data:`JUDGE_RUBRIC`), optionally mixed with
the cheap verifier rubric in ``rewards.py`` (length, greeting and sign-off,
politeness, the request's key points, no template leftovers).

The data (``data.jsonl``, 40 emails with reference replies written for this
repo) is meant for a real instruction-tuned model; the reference replies also
serve as SFT pairs for a fixed 200-step warm start of the tiny policy, which
learns a reply's shape (greeting, sign-off, length), not the store policy.
A fixed held-out split of 10 emails is drawn with its own seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from rlab.engine.validation import located, one_line
from rlab.scenarios.base import ScenarioBase

DATA_FILE = Path(__file__).with_name("data.jsonl")
#: Seed of the held-out split; changing it changes the manifest's dataset hash.
HELD_OUT_SEED = 20250522
HELD_OUT_SIZE = 10

SYSTEM_PROMPT = """\
You are a customer-support agent for Northwind Home, an online store of home goods. \
Reply to the customer's email: greet them by name when they give one, answer their \
actual request concretely and kindly, follow the store policy below, never invent \
other policies, and sign off as "The Northwind Home team". Write plain text, \
30 to 120 words, with no placeholders such as [Your Name].

Store policy:
- We ship to the United States and Canada only. Standard shipping takes 3-5 business \
days and is free on orders over $50; express costs $12.95 and takes 1-2 business days. \
Orders placed before 2 pm ET on a business day ship the same day. A tracking link is \
emailed at dispatch and can take up to 24 hours to become active.
- Orders can be cancelled within 1 hour of ordering; the address can be changed until dispatch.
- Unused items in their original packaging can be returned within 30 days of delivery; \
the $6.95 return shipping is deducted from the refund, except when we made a mistake \
(wrong or missing item), then the label is free.
- Damaged or defective items: a photo is enough; the customer chooses a free \
replacement or a full refund and does not need to send the item back.
- Refunds are issued within 2 business days of receiving a return; banks take 5-7 \
business days to show them.
- Electrical items have a 2-year warranty.
- If the price drops within 14 days of purchase, we refund the difference.
- One discount code per order, applied at checkout only. Newsletter subscribers get \
10% off their first order. There is no student discount.
- Gift cards are valid for 3 years and cannot be exchanged for cash. We add free gift \
notes and can leave prices off the packing slip, but we do not gift wrap.
- Orders of more than 20 units go to business@northwindhome.example."""

#: Grading standards for the judge (pass as ``RulerJudge(rubric=JUDGE_RUBRIC)``).
JUDGE_RUBRIC = """\
- The best reply resolves the customer's request concretely, with the next step \
spelled out, and follows the store policy given in the system prompt.
- A reply that invents a policy, promises something the policy does not allow, or \
ignores the request scores low however polite it is.
- Warm, professional tone: acknowledge the problem, apologise when the store is at \
fault, stay calm with angry customers; rudeness or blame scores near 0.
- Prefer clear, brief replies (about 30 to 120 words) with a greeting and a \
sign-off; template leftovers such as [Your Name] are a serious flaw.
- Small quality differences get small score differences; large ones large."""


class SupportExample(BaseModel):
    """One line of ``data.jsonl``: an email (``prompt``), its reference reply
    (``answer``), the points a good reply mentions (``keywords``) and a topic."""

    model_config = ConfigDict(extra="forbid")

    id: str
    topic: str
    prompt: str
    answer: str
    keywords: list[str]

    @field_validator("prompt", "answer")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value


def load_examples(path: Path = DATA_FILE) -> list[dict[str, Any]]:
    """Read and validate the dataset: one JSON object per line, in file order.

    Raises:
        ValueError: a line is not valid JSON or lacks a field (the message
            names the line number), or two examples share an id.
    """
    examples: list[dict[str, Any]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            examples.append(SupportExample.model_validate_json(line).model_dump())
        except ValidationError as exc:
            raise ValueError(f"{path.name} line {number} is not a valid example: "
                             f"{one_line(exc, located)}") from exc
    ids = [ex["id"] for ex in examples]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path.name} has repeated ids; every example needs its own id")
    return examples


@dataclass(frozen=True)
class SupportReplies(ScenarioBase):
    """The support-replies scenario (single-turn, subjective, judge-scored)."""

    name: str = "support_replies"
    system_prompt: str | None = SYSTEM_PROMPT
    reward_file: Path = Path(__file__).with_name("rewards.py")
    judge_rubric: str | None = JUDGE_RUBRIC
    # Solved: every verifier check passes (the judge's score is reward, not a verdict).
    success: str | None = "all_checks"
    # 30 replies of some 600 characters are too few and too long for the tiny
    # policy to reach a pass@1 target (0.00 after 100 steps at 3 s each): a fixed
    # budget teaches it the shape of a reply (greeting, sign-off), not the policy.
    warm_start_steps: int = 200
    # 30 training emails: RunConfig's 32 prompts a step would be refused; replies
    # are 30-120 words, not the 6 tokens of an arithmetic answer. Four groups of
    # eight a step: a judge ranks eight replies at once (RULER), and the tiny
    # policy's step 1 stays within issue 33's 60 s on 2 cores (8 groups: 54 s
    # for the step alone, its prompts are some 1,900 characters).
    run_defaults: dict[str, Any] = field(default_factory=lambda: {"prompts_per_step": 4, "max_new_tokens": 120})

    def _held_out_ids(self, examples: list[dict[str, Any]]) -> set[str]:
        ids = sorted(ex["id"] for ex in examples)
        return set(random.Random(HELD_OUT_SEED).sample(ids, HELD_OUT_SIZE))

    def eval_examples(self) -> list[dict[str, Any]]:
        """The fixed held-out split: 10 emails, same for every seed, file order."""
        examples = load_examples()
        held = self._held_out_ids(examples)
        return [ex for ex in examples if ex["id"] in held]

    def train_examples(self, seed: int) -> list[dict[str, Any]]:
        """The other 30 emails, shuffled with ``seed``."""
        examples = load_examples()
        held = self._held_out_ids(examples)
        train = [ex for ex in examples if ex["id"] not in held]
        random.Random(seed).shuffle(train)
        return train

    def sft_pairs(self, seed: int) -> list[tuple[str, str]]:
        """(email, reference reply) pairs of the train split, for the warm start."""
        return [(ex["prompt"], ex["answer"]) for ex in self.train_examples(seed)]


SCENARIO = SupportReplies()
