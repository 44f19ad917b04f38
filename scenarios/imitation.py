"""Warm-start data for multi-step scenarios: (context, action) pairs from scripted play.

The tiny policy's chat template concatenates message contents and ends each
assistant message with EOS, so the context of a turn is the scenario's
system prompt (the run sends it as the first message of every episode), the
first observation, then for every earlier turn its action, :data:`EOS_TEXT`
and the next observation; the context matches ``Policy.render`` exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

#: How EOS appears in the text of a context (the tokenizer maps it to EOS).
EOS_TEXT = "</s>"


def imitation_pairs(make_env: Callable[[dict[str, Any]], Any], examples: Iterable[dict[str, Any]],
                    choose: Callable[[Any], str], system_prompt: str | None = None) -> list[tuple[str, str]]:
    """Play one episode per example with ``choose(env) -> action``; return every (context, action).

    Args:
        make_env: the scenario's environment factory.
        examples: the episodes' examples (their seeds fix the start states).
        choose: the scripted policy, given the environment before each turn.
        system_prompt: the scenario's system prompt, which opens every context
            as it opens every episode of a run.
    """
    pairs = []
    for example in examples:
        env = make_env(example)
        observation, _ = env.reset(example)
        context, done = (system_prompt or "") + "".join(m["content"] for m in observation), False
        while not done:
            action = choose(env)
            pairs.append((context, action))
            observation, _, done, _ = env.step(action)
            context += action + EOS_TEXT + "".join(m["content"] for m in observation)
    return pairs
