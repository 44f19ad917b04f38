"""The number-guessing environment: find a secret in 1..N from higher/lower answers.

Observations are kept short for the tiny character-level policy (a 256-token
context) and say the interval still possible, so the last observation alone
is enough to play well:

    reset       ``1..63?``
    too low     ``higher 33..63?``
    too high    ``lower 1..31?``
    found       ``correct``
    not a number in 1..N: ``bad guess 1..63?`` (invalid; the state is kept)
    last turn used up: ``lost, it was 17``

The state key is the interval ``(lo, hi)``: every episode starts at (1, N)
and the same intervals recur across the episodes of a group, which is what
GiGPO's anchor states need. Every assistant turn, valid or not, counts
towards the turn limit.
"""

from __future__ import annotations

import re
from typing import Any

GUESS = re.compile(r"\s*(\d{1,9})\s*")


def prompt_text(lo: int, hi: int) -> str:
    """The question for an interval, e.g. ``1..63?``."""
    return f"{lo}..{hi}?"


class NumberGuessEnv:
    """One episode; the secret comes from ``example["secret"]``.

    Args:
        n: the secret lies in 1..n.
        max_turns: guesses allowed (>= 1); the episode ends after them.

    Rewards: 1.0 on the correct guess, 0.0 on every other turn.
    """

    def __init__(self, n: int, max_turns: int):
        if n < 1 or max_turns < 1:
            raise ValueError(f"NumberGuessEnv needs n >= 1 and max_turns >= 1, got n={n}, max_turns={max_turns}")
        self.n = n
        self.max_turns = max_turns
        self.invalid = False

    def reset(self, example: dict[str, Any]) -> tuple[list[dict], tuple[int, int]]:
        """Start an episode for ``example["secret"]``; state key (1, n).

        Raises:
            ValueError: the example has no integer ``secret`` in 1..n.
        """
        secret = example.get("secret")
        if not isinstance(secret, int) or not 1 <= secret <= self.n:
            raise ValueError(f"example {example.get('id')!r} needs an integer 'secret' in 1..{self.n}, got {secret!r}")
        self.secret, self.lo, self.hi, self.turn = secret, 1, self.n, 0
        self.invalid = False
        return [_user(prompt_text(self.lo, self.hi))], (self.lo, self.hi)

    def step(self, action: str) -> tuple[list[dict], float, bool, tuple[int, int]]:
        """Apply one guess; see the module docstring for the answers."""
        self.turn += 1
        out_of_turns = self.turn >= self.max_turns
        match = GUESS.fullmatch(action)
        guess = int(match.group(1)) if match else None
        self.invalid = guess is None or not 1 <= guess <= self.n
        if guess == self.secret:
            return [_user("correct")], 1.0, True, (self.lo, self.hi)
        if not self.invalid:
            if guess < self.secret:
                self.lo = max(self.lo, guess + 1)
            else:
                self.hi = min(self.hi, guess - 1)
        if out_of_turns:
            return [_user(f"lost, it was {self.secret}")], 0.0, True, (self.lo, self.hi)
        if self.invalid:
            text = f"bad guess {prompt_text(self.lo, self.hi)}"
        else:
            text = f"{'higher' if guess < self.secret else 'lower'} {prompt_text(self.lo, self.hi)}"
        return [_user(text)], 0.0, False, (self.lo, self.hi)


def _user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}
