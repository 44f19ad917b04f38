"""Number guessing: a multi-step scenario with recurring states.

The policy finds a secret integer in 1..63 within 6 guesses from
"higher"/"lower" answers (see :mod:`scenarios.number_guess.env`). 63 = 2**6 - 1,
so binary search always wins in 6 guesses, while uniform guessing inside the
interval (what the tiny policy is warm-started on) wins about half the time
(48 % in 3,000 simulated episodes), so RL has room to show. The secret is
hidden from the policy, so the held-out split is simply every secret once;
train examples draw secrets with the run's seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlab.scenarios.base import ScenarioBase
from rlab.scenarios.imitation import imitation_pairs

from rlab.scenarios.number_guess.env import NumberGuessEnv, prompt_text

N = 63
MAX_TURNS = 6
TRAIN_SIZE = 2000
SFT_EPISODES = 1500
# Short: the tiny policy's 256-token context holds the prompt and a whole episode.
SYSTEM_PROMPT = f"Guess my number in 1..{N}. Reply with one integer; I say higher or lower and what is left.\n"


def _example(secret: int, suffix: str = "") -> dict[str, Any]:
    return {"id": f"guess{N}-{secret}{suffix}", "prompt": prompt_text(1, N), "answer": str(secret), "secret": secret}


@dataclass(frozen=True)
class NumberGuess(ScenarioBase):
    """The number-guessing scenario (multi-step, reward 1 on the correct guess)."""

    name: str = "number_guess"
    multi_step: bool = True
    system_prompt: str | None = SYSTEM_PROMPT
    reward_file: Path = Path(__file__).with_name("rewards.py")
    success: str | None = "solved"  # solved: the secret guessed
    max_turns: int = MAX_TURNS
    # The tiny policy imitates random legal play for a fixed number of
    # steps (no pass@1 target: random play is the point), so RL has room.
    warm_start_steps: int = 400

    def make_env(self, example: dict[str, Any]) -> NumberGuessEnv:
        """A fresh environment for ``example`` (the secret is read on reset)."""
        return NumberGuessEnv(N, self.max_turns)

    def eval_examples(self) -> list[dict[str, Any]]:
        """The fixed held-out split: every secret 1..N once (63 examples)."""
        return [_example(s) for s in range(1, N + 1)]

    def train_examples(self, seed: int) -> list[dict[str, Any]]:
        """2,000 examples with secrets drawn uniformly with ``seed``."""
        rng = random.Random(seed)
        return [_example(rng.randint(1, N), f"-{i}") for i in range(TRAIN_SIZE)]

    def sft_pairs(self, seed: int) -> list[tuple[str, str]]:
        """(context, guess) pairs from uniform guessing inside the interval.

        The context is the conversation so far as the tiny model sees it:
        the system prompt and the messages' contents concatenated, each assistant message followed
        by ``scenarios.imitation.EOS_TEXT``. Only legal guesses are shown.
        """
        rng = random.Random(f"sft-{seed}")  # not the stream that drew the secrets
        return imitation_pairs(self.make_env, self.train_examples(seed)[:SFT_EPISODES],
                               lambda env: str(rng.randint(env.lo, env.hi)), self.system_prompt)


SCENARIO = NumberGuess()
