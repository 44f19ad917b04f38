"""Rubric of the 2048 scenario: how large a tile did the episode reach?

Edit this file (in the TUI with ``e``, or in any editor) to change how
episodes are rewarded. Each reward function follows the scorer contract
``score(example, completion) -> {"reward": float, "details": dict}``; for
this multi-step scenario ``completion`` is the episode's transcript, a list
of OpenAI-style message dicts. ``WEIGHTS`` names the functions of the rubric.
"""

import re

from rlab.engine.rewards.helpers import env_reward  # the environment's own reward, per turn

# 4 rows of 4 cells: "." empty, hex digit k for the tile 2**k
BOARD = re.compile(r"[.1-9a-f]{4}(?:/[.1-9a-f]{4}){3}")


def max_tile(example, completion):
    """log2(largest tile on the last board) / 11, so a 2048 tile scores 1.0.

    details: ``parse_status`` is ``ok`` or ``no_board`` (no board in the
    environment's messages); ``max_tile`` is the tile value (e.g. 16).
    """
    boards = [b for m in completion if m["role"] == "user" for b in BOARD.findall(m["content"])]
    if not boards:
        return {"reward": 0.0, "details": {"parse_status": "no_board", "max_tile": None}}
    exponent = max(int(c, 16) for c in boards[-1] if c not in "./")
    return {"reward": exponent / 11, "details": {"parse_status": "ok", "max_tile": 2**exponent}}


def legal_moves(example, completion):
    """Fraction of the assistant's moves the environment accepted (1.0 when none was made).

    details: ``parse_status`` ``ok``; ``rejected`` counts the "bad" answers.
    """
    moves = sum(m["role"] == "assistant" for m in completion)
    rejected = sum(m["role"] == "user" and m["content"].startswith("bad ") for m in completion)
    reward = 1.0 - rejected / moves if moves else 1.0
    return {"reward": reward, "details": {"parse_status": "ok", "rejected": rejected}}


# env_reward: the environment's merge rewards, per move (log2(tile) / 10 per merge, plus
# log2(max tile) / 10 at the end); give it a weight to train on them.
WEIGHTS = {"max_tile": 1.0, "legal_moves": 0.0, "env_reward": 0.0}
