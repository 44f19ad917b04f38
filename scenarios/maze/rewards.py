"""Rubric of the maze scenario: did the walk reach the goal?

Edit this file (in the TUI with ``e``, or in any editor) to change how
episodes are rewarded. Each reward function follows the scorer contract
``score(example, completion) -> {"reward": float, "details": dict}``; for
this multi-step scenario ``completion`` is the episode's transcript, a list
of OpenAI-style message dicts. ``WEIGHTS`` names the functions of the rubric.
"""

from rlab.engine.rewards.helpers import env_reward  # the environment's own reward, per turn


def reached(example, completion):
    """1.0 when the environment's last answer is "goal", else 0.0.

    details: ``parse_status`` ``ok`` (reached), ``lost`` (moves used up) or
    ``unfinished``; ``moves`` counts the assistant turns, ``bumps`` the
    rejected moves; on reaching the goal, ``excess_moves`` is how many moves
    the walk took beyond the shortest one (0: a shortest walk).
    """
    answers = [m["content"] for m in completion if m["role"] == "user"]
    last = answers[-1] if answers else ""
    status = {"goal": "ok", "lost": "lost"}.get(last, "unfinished")
    moves = sum(m["role"] == "assistant" for m in completion)
    details = {"parse_status": status, "moves": moves, "bumps": sum(a.startswith("bump") for a in answers)}
    if status == "ok" and "shortest" in example:  # runs stored before the field have no distance
        details["excess_moves"] = moves - example["shortest"]
    return {"reward": 1.0 if status == "ok" else 0.0, "details": details}


# env_reward pays the same 1.0 as reached here; weigh one or the other.
WEIGHTS = {"reached": 1.0, "env_reward": 0.0}
