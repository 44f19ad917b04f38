"""Rubric of the FrozenLake scenarios: gymnasium's own reward, and did the walk reach the goal?

Edit this file (in the TUI with ``e``, or in any editor) to change how
episodes are rewarded. Each reward function follows the scorer contract
``score(example, completion) -> {"reward": float, "details": dict}``; for
this multi-step scenario ``completion`` is the episode's transcript, a list
of OpenAI-style message dicts. ``WEIGHTS`` names the functions of the rubric.
"""

from rlab.engine.rewards.helpers import env_reward  # the environment's own reward, per turn


def reached(example, completion):
    """1.0 when the environment's last answer is "goal", else 0.0.

    details: ``parse_status`` ``ok`` (the goal), ``hole``, ``lost`` (moves
    used up) or ``unfinished``; ``moves`` counts the assistant turns,
    ``invalid`` the replies that were not a move.
    """
    answers = [m["content"] for m in completion if m["role"] == "user"]
    last = answers[-1] if answers else ""
    status = {"goal": "ok", "hole": "hole", "lost": "lost"}.get(last, "unfinished")
    details = {"parse_status": status, "moves": sum(m["role"] == "assistant" for m in completion),
               "invalid": sum(a.startswith("bad") for a in answers)}
    return {"reward": 1.0 if status == "ok" else 0.0, "details": details}


# gymnasium's reward (1.0 on the goal) trains; `reached` says the same in words and
# is the scenario's success function. Weigh one or the other.
WEIGHTS = {"env_reward": 1.0, "reached": 0.0}
