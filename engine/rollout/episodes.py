"""Multi-turn rollouts: the group runner (the environment protocol is in engine.types).

An environment plays one episode: ``reset(example)`` gives the first
observation messages and the initial state key; each ``step(assistant_text)``
applies one assistant turn and gives the next observation messages, the
turn's reward, whether the episode is over, and the new state key. A group
is n episodes of the same example, each from the identical initial state
(environments seed themselves from the example), as GRPO and GiGPO require.

Only assistant tokens are trained: every :class:`~rlab.engine.types.Turn`
keeps the rendered context before it (``prompt_ids``) apart from its own
sampled tokens (``completion_ids``), so each turn becomes one trainer sample
whose loss mask covers exactly that turn's assistant tokens
(``rlab.engine.train.batch.train_samples``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from rlab.engine.policy.kv import PrefixCache
from rlab.engine.types import Environment, Example, Message, Sample, Sampler, ToolEnvironment, Trajectory, Turn


class InitialStateMismatch(ValueError):
    """Environments reset on one example did not start from the same state."""


def observation_key(messages: Sequence[Message]) -> str:
    """Default state key: first 16 hex chars of sha256 of the observation text.

    The text is the messages' contents joined by newlines.
    """
    text = "\n".join(str(m.get("content", "")) for m in messages)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def run_group(
    policy: Sampler,
    make_env: Callable[[Example], Environment],
    example: Example,
    n: int,
    *,
    max_turns: int,
    max_new_tokens: int,
    temperature: float,
    invalid_penalty: float = 0.0,
    system_prompt: str | None = None,
    tools: list[dict[str, Any]] | None = None,
) -> list[Trajectory]:
    """Play a group: ``n`` episodes of ``example``, all from the same initial state.

    Each turn, the episodes still running are rendered with
    ``policy.render`` and sampled with ONE ``policy.sample`` call; each text
    goes to its environment's ``step``. An invalid action costs
    ``invalid_penalty`` (subtracted from that turn's reward) and is recorded;
    the episode goes on. Episodes still running after ``max_turns`` turns are
    marked truncated. A state key of None becomes :func:`observation_key`.

    Args:
        policy: renders messages to token ids and samples completions.
        make_env: builds a fresh environment for ``example``.
        example: the scenario example (its seed fixes the initial state).
        n: episodes in the group (>= 1).
        max_turns: assistant turns at most per episode (>= 1).
        max_new_tokens: tokens at most per assistant turn.
        temperature: sampling temperature (0: greedy, if the policy allows).
        invalid_penalty: >= 0, subtracted from the reward of an invalid turn.
        system_prompt: if given, the first message of every episode.
        tools: the JSON schemas of the tools the environment runs (a tool
            task), rendered into every turn's prompt (``Sampler.render``).

    Returns:
        ``n`` :class:`Trajectory` objects, in order.

    Raises:
        InitialStateMismatch: the n environments did not reset to the same
            state key (the scenario must seed its environment from the example).
        ValueError: ``n`` or ``max_turns`` below 1, a negative penalty, or a
            policy that returned the wrong number of samples.
    """
    return run_groups(policy, make_env, [example], n, max_turns=max_turns, max_new_tokens=max_new_tokens,
                      temperature=temperature, invalid_penalty=invalid_penalty,
                      system_prompt=system_prompt, tools=tools)[0]


def run_groups(
    policy: Sampler,
    make_env: Callable[[Example], Environment],
    examples: Sequence[Example],
    n: int,
    **options: Any,
) -> list[list[Trajectory]]:
    """Play one group of ``n`` episodes per example, all groups batched together.

    Every turn is ONE ``policy.sample`` call over the running episodes of
    every group (P groups x n episodes), which is what makes a multi-step
    step affordable on a CPU. Options and errors as in :func:`run_group`.

    Returns:
        P lists of ``n`` :class:`Trajectory` objects, in example order.
    """
    if n < 1:
        raise ValueError(f"run_group needs n >= 1 episodes, got n={n}")
    _check_options(options["max_turns"], options.get("invalid_penalty", 0.0))
    flat = [example for example in examples for _ in range(n)]
    envs = [make_env(example) for example in flat]
    episodes = _start(envs, flat, options.get("system_prompt"))
    groups = [episodes[i * n : (i + 1) * n] for i in range(len(examples))]
    for example, group in zip(examples, groups):
        _check_same_start(example, group)
    _play(policy, envs, episodes, options["max_turns"], options["max_new_tokens"],
          options["temperature"], options.get("invalid_penalty", 0.0), options.get("tools"))
    return groups


def _check_same_start(example: Example, group: list[Trajectory]) -> None:
    keys = [ep.initial_state_key for ep in group]
    if any(k != keys[0] for k in keys):
        raise InitialStateMismatch(
            f"example {example.get('id')!r}: the {len(group)} environments reset to different "
            f"initial states {sorted(set(map(repr, keys)))}; seed the environment from the example "
            "so every episode of a group starts from the same state"
        )


def run_episodes(
    policy: Sampler,
    make_env: Callable[[Example], Environment],
    examples: Sequence[Example],
    *,
    max_turns: int,
    max_new_tokens: int,
    temperature: float,
    invalid_penalty: float = 0.0,
    system_prompt: str | None = None,
    tools: list[dict[str, Any]] | None = None,
) -> list[Trajectory]:
    """Play one episode per example, batching the policy across all of them.

    The loop :func:`run_group` uses, for any mix of examples: e.g. held-out
    evaluation (pass@1 = share of episodes the rubric scores as solved) or
    the tiny model's warm-start probe. Arguments as in :func:`run_group`.

    Returns:
        One :class:`Trajectory` per example, in order.

    Raises:
        ValueError: no examples, ``max_turns`` below 1, a negative penalty,
            or a policy that returned the wrong number of samples.
    """
    if not examples:
        raise ValueError("run_episodes needs at least one example")
    groups = run_groups(policy, make_env, examples, 1, max_turns=max_turns, max_new_tokens=max_new_tokens,
                        temperature=temperature, invalid_penalty=invalid_penalty,
                        system_prompt=system_prompt, tools=tools)
    return [group[0] for group in groups]


def _check_options(max_turns: int, invalid_penalty: float) -> None:
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    if invalid_penalty < 0:
        raise ValueError(f"invalid_penalty is subtracted from the reward; give it >= 0, got {invalid_penalty}")


def _start(envs: list[Environment], examples: Sequence[Example], system_prompt: str | None) -> list[Trajectory]:
    """Reset every environment on its example; the episodes' opening messages."""
    head = [{"role": "system", "content": system_prompt}] if system_prompt else []
    episodes = []
    for env, example in zip(envs, examples):
        observation, key = env.reset(example)
        key = observation_key(observation) if key is None else key
        episodes.append(Trajectory(messages=head + list(observation), initial_state_key=key))
    return episodes


def _play(
    policy: Sampler, envs: list[Environment], episodes: list[Trajectory], max_turns: int,
    max_new_tokens: int, temperature: float, penalty: float, tools: list[dict[str, Any]] | None = None,
) -> None:
    """Turn loop: one batched ``policy.sample`` per turn over the running episodes.

    A turn's context is the last one plus the sampled turn and the new
    observation, so one :class:`PrefixCache` carries each episode's KV from
    turn to turn: only the observation is run through the model again.
    """
    keys = [ep.initial_state_key for ep in episodes]
    cache = PrefixCache()
    for _ in range(max_turns):
        running = [i for i, ep in enumerate(episodes) if not ep.done]
        if not running:
            break
        prompts = [policy.render(episodes[i].messages, tools) for i in running]
        samples = policy.sample(prompts, max_new_tokens=max_new_tokens, temperature=temperature, cache=cache)
        if len(samples) != len(prompts):
            raise ValueError(f"policy.sample returned {len(samples)} samples for {len(prompts)} prompts")
        for i, prompt, sample in zip(running, prompts, samples):
            keys[i] = _play_turn(envs[i], episodes[i], prompt, sample, keys[i], penalty)
    for ep in episodes:
        ep.truncated = not ep.done


def _play_turn(
    env: Environment, episode: Trajectory, prompt: list[int], sample: Sample, key: Hashable, penalty: float
) -> Hashable:
    """Apply one sampled turn to ``env`` and ``episode``; return the next state key."""
    observation, reward, done, next_key = env.step(sample.text)
    invalid = bool(env.invalid)
    calls, message = [], {"role": "assistant", "content": sample.text}
    if isinstance(env, ToolEnvironment):  # the turn as OpenAI writes it: its content and its calls
        calls, message = list(env.last_calls), env.last_message
        episode.tools = True
    episode.turns.append(
        Turn(
            prompt_ids=list(prompt),
            completion_ids=list(sample.token_ids),
            logprobs=list(sample.logprobs),
            text=sample.text,
            reward=float(reward) - (penalty if invalid else 0.0),
            state_key=key,
            observation=list(observation),
            invalid=invalid,
            truncated=sample.truncated,
            tool_calls=calls,
        )
    )
    episode.messages.append(message)
    episode.messages.extend(observation)
    episode.done = bool(done)
    return observation_key(observation) if next_key is None else next_key
