"""Rubric of the sokoban scenario: gym-sokoban's own reward, and is the box on its target?

Edit this file (in the TUI with ``e``, or in any editor) to change how
episodes are rewarded. Each reward function follows the scorer contract
``score(example, completion) -> {"reward": float, "details": dict}``; for
this multi-step scenario ``completion`` is the episode's transcript, a list
of OpenAI-style message dicts. ``WEIGHTS`` names the functions of the rubric.
"""

from rlab.engine.rewards.helpers import env_reward  # the environment's own reward, per turn


def solved(example, completion):
    """1.0 when the environment's last answer is "solved" (every box on a target), else 0.0.

    details: ``parse_status`` ``ok`` (solved), ``lost`` (steps used up) or
    ``unfinished``; ``moves`` counts the assistant turns, ``invalid`` the
    replies that were not a move.
    """
    answers = [m["content"] for m in completion if m["role"] == "user"]
    last = answers[-1] if answers else ""
    status = {"solved": "ok", "lost": "lost"}.get(last, "unfinished")
    details = {"parse_status": status, "moves": sum(m["role"] == "assistant" for m in completion),
               "invalid": sum(a.startswith("bad") for a in answers)}
    return {"reward": 1.0 if status == "ok" else 0.0, "details": details}


# gym-sokoban's reward (-0.1 a step, +1 box on target, +10 solved) trains;
# `solved` is the scenario's success function.
WEIGHTS = {"env_reward": 1.0, "solved": 0.0}
