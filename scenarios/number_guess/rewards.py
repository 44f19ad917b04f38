"""Rubric of the number-guessing scenario: was the secret found?

Edit this file (in the TUI with ``e``, or in any editor) to change how
episodes are rewarded. Each reward function follows the scorer contract
``score(example, completion) -> {"reward": float, "details": dict}``; for
this multi-step scenario ``completion`` is the episode's transcript, a list
of OpenAI-style message dicts. ``WEIGHTS`` names the functions of the rubric.
"""


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


def env_reward(example, completion):
    """The environment's own reward: the sum of its per-turn rewards, also given per turn.

    The engine hands the environment's rewards to the rubric as
    ``example["_env_rewards"]`` (one float per assistant turn); returning
    them as ``step_rewards`` lets GiGPO's step-level advantage see when
    they were earned. Weight it in WEIGHTS like any other function.
    """
    if "_env_rewards" not in example:  # scored outside a run (no environment): no verdict
        return {"reward": 0.0, "details": {"turns": None}}
    steps = [float(r) for r in example["_env_rewards"]]
    return {"reward": sum(steps), "step_rewards": steps, "details": {"turns": len(steps)}}


# env_reward pays the same 1.0 as solved here (the environment rewards the correct guess);
# weigh one or the other.
WEIGHTS = {"solved": 1.0, "env_reward": 0.0}
