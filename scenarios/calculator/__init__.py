"""Calculator: a tool-using agent that must learn to call its tools.

Questions are products of two 3-digit numbers ("What is 482 * 377?"): the
tiny policy cannot work them out itself (its direct answers are right about
never), but the tool ``multiply(a, b)`` (``tools.py``) can; ``add(a, b)`` is
offered too, and calling it gives a wrong answer. An
episode is the policy calling a tool (``<tool_call>{"name": "multiply",
"arguments": {"a": 482, "b": 377}}</tool_call>``), reading the result, and
answering with it; ``rewards.py`` pays the exact answer and charges each
failed call a little.

The tiny policy is warm-started on transcripts (:meth:`Calculator.sft_transcripts`)
of which :data:`TOOL_SHARE` call the right tool and copy its result; the rest
answer at once ("The answer is ..." with a plausible wrong number). So it
samples a call about a third of the time but answers greedily without one
(held-out pass@1 near 0: "The" outweighs "<tool_call>"), and RL has to raise
the tool-use rate for pass@1 to climb. ``--no-tools`` runs the same
task with the tools taken away: the control arm, which stays near 0.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlab.scenarios.base import ScenarioBase

#: Share of warm-start transcripts that call the tool (the rest answer directly, wrongly).
TOOL_SHARE = 0.35
#: Extra transcripts per tool-calling one that train only the answer after the result (the call
#: is context there), so copying the result is learned well without making the call more likely.
ANSWER_EXTRA = 1
#: Share of tool-calling transcripts that call once more to check before answering, as real
#: models sometimes do: the policy samples a second call now and then, so a reward that pays
#: per call (``rewards_pay_per_call.py``) finds the loop (the guided hack, README "Your own agent").
RECHECK_SHARE = 0.1
HELD_OUT_SEED, TRAIN_SEED = 20261128, 1
HELD_OUT_SIZE, TRAIN_SIZE, SFT_SIZE = 128, 4000, 4000
MAX_TURNS = 4
SYSTEM_PROMPT = "Answer with the number; the tools compute it.\n"


def question(op: str, a: int, b: int) -> dict[str, Any]:
    """One example: the question, its exact answer, the tool that computes it and its operands."""
    symbol, result = ("+", a + b) if op == "add" else ("*", a * b)
    return {"id": f"{op}-{a}-{b}", "prompt": f"What is {a} {symbol} {b}?", "answer": str(result),
            "op": op, "a": a, "b": b}


def draw(rng: random.Random) -> dict[str, Any]:
    """A random question: the product of two 3-digit numbers.

    (Sums of two 4-digit numbers were a third of the questions once; the tiny
    policy copied their first operand into its call so badly that not one was
    solved in 300 s of training, so the sums gave RL nothing to learn from.)"""
    return question("multiply", rng.randint(100, 999), rng.randint(100, 999))


def near_miss(answer: int, rng: random.Random) -> str:
    """A plausible wrong answer: the right number of digits, the leading ones kept, the rest drawn."""
    text = str(answer)
    keep = max(1, len(text) // 2)
    guess = text[:keep] + "".join(str(rng.randint(0, 9)) for _ in text[keep:])
    return guess if guess != text else text[:keep] + str((int(text[keep]) + 1) % 10) + text[keep + 1:]


@dataclass(frozen=True)
class Calculator(ScenarioBase):
    """The calculator tool scenario (see the module doc)."""

    name: str = "calculator"
    multi_step: bool = True
    system_prompt: str | None = SYSTEM_PROMPT
    reward_file: Path = Path(__file__).with_name("rewards.py")
    tools_file: Path = Path(__file__).with_name("tools.py")
    judge_rubric: str | None = ("Rank the trajectories by whether the final answer is the exact result. "
                                "A correct lookup with a tool beats a confident guess.")
    success: str | None = "correct"
    max_turns: int = MAX_TURNS
    warm_start_steps: int = 1500
    # A call is ~80 characters for the character-level tiny policy; four turns fit in 512.
    tiny_context_tokens: int | None = 512
    run_defaults: dict[str, Any] = field(default_factory=lambda: {
        "max_new_tokens": 96, "temperature": 1.0, "prompts_per_step": 16, "eval_every": 10})

    def eval_examples(self) -> list[dict[str, Any]]:
        """The fixed held-out split: 128 questions, the same for every seed."""
        rng = random.Random(HELD_OUT_SEED)
        return [draw(rng) for _ in range(HELD_OUT_SIZE)]

    def train_examples(self, seed: int) -> list[dict[str, Any]]:
        """4,000 questions drawn with ``seed`` (the held-out ones never among them)."""
        held = {ex["id"] for ex in self.eval_examples()}
        rng = random.Random(f"{TRAIN_SEED}-{seed}")
        return [ex for ex in (draw(rng) for _ in range(TRAIN_SIZE)) if ex["id"] not in held]

    def sft_pairs(self, seed: int) -> list[tuple[str, str]]:
        """None: the tiny policy learns from :meth:`sft_transcripts`, rendered by its own template."""
        return []

    def sft_transcripts(self, seed: int) -> list[list[dict[str, Any]]]:
        """Warm-start conversations (after the system prompt): :data:`TOOL_SHARE` of them call the
        right tool (:data:`RECHECK_SHARE` of those twice) and answer with its result, the others
        answer at once with a near miss; and :data:`ANSWER_EXTRA` per tool-calling one whose call
        is context only (``"train": False``)."""
        rng = random.Random(f"sft-{seed}")
        out = []
        for k in range(SFT_SIZE):
            ex = draw(rng)
            if rng.random() >= TOOL_SHARE:
                ask = {"role": "user", "content": ex["prompt"]}
                out.append([ask, {"role": "assistant", "content": f"The answer is {near_miss(int(ex['answer']), rng)}"}])
                continue
            out.append(_lookup(ex, calls=2 if rng.random() < RECHECK_SHARE else 1))
            out += [_lookup(draw(rng), train_call=False) for _ in range(ANSWER_EXTRA)]
        return out

    def demonstrations(self, seed: int) -> list[list[dict[str, Any]]]:
        """A real model's warm start: the transcripts that call the right tool and answer with
        its result (the near-miss guesses are the tiny policy's, so its RL has room)."""
        return [t for t in self.sft_transcripts(seed) if any("tool_calls" in m for m in t)]


def _lookup(ex: dict[str, Any], train_call: bool = True, calls: int = 1) -> list[dict[str, Any]]:
    """A transcript that calls the right tool (``calls`` times in a row) and answers with its result."""
    out = [{"role": "user", "content": ex["prompt"]}]
    for t in range(calls):
        call = {"id": f"call_{t}_0", "type": "function",
                "function": {"name": ex["op"], "arguments": {"a": ex["a"], "b": ex["b"]}}}
        out += [{"role": "assistant", "content": "", "tool_calls": [call], **({} if train_call else {"train": False})},
                {"role": "tool", "tool_call_id": call["id"], "name": ex["op"], "content": ex["answer"]}]
    return out + [{"role": "assistant", "content": ex["answer"]}]


SCENARIO = Calculator()
