"""Rubric of the number-guessing scenario: was the secret found?

Edit this file (in the TUI with ``e``, or in any editor) to change how
episodes are rewarded. Each reward function follows the scorer contract
``score(example, completion) -> {"reward": float, "details": dict}``; for
this multi-step scenario ``completion`` is the episode's transcript, a list
of OpenAI-style message dicts. ``WEIGHTS`` names the functions of the rubric.
"""

from rlab.engine.rewards.helpers import env_reward  # the environment's own reward, per turn


def solved(example, completion):
    """1.0 when the environment's last answer is "correct", else 0.0.

    details: ``parse_status`` is ``ok`` (found), ``lost`` (turns used up) or
    ``unfinished`` (the episode was cut off); ``guesses`` counts the
    assistant turns.
    """
    answers = [m["content"] for m in completion if m["role"] == "user"]
    last = answers[-1] if answers else ""
    guesses = sum(m["role"] == "assistant" for m in completion)
    if last == "correct":
        status = "ok"
    elif last.startswith("lost"):
        status = "lost"
    else:
        status = "unfinished"
    return {"reward": 1.0 if status == "ok" else 0.0, "details": {"parse_status": status, "guesses": guesses}}


# env_reward pays the same 1.0 as solved here (the environment rewards the correct guess);
# weigh one or the other.
WEIGHTS = {"solved": 1.0, "env_reward": 0.0}
