"""The judge's prompt for one group: RULER's layout.

RULER (Relative Universal LLM-Elicited Rewards, OpenPipe ART, 2025): the
judge sees all G trajectories of a group side by side. The messages every
trajectory shares at its start are sent once, as context; each
trajectory's remainder is tagged with its id ("1" .. "G"). The answer's
form is in the instructions too, for servers that ignore ``response_format``
(``engine.rewards.judge.answer``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from rlab.engine.rewards.judge.answer import answer_schema

#: An OpenAI-style chat message: ``{"role": ..., "content": ...}``.
Message = dict[str, Any]

#: Default grading standards (the rubric); replace it with ``rubric=``.
DEFAULT_RUBRIC = """\
- A trajectory that reaches the goal must score clearly higher than one that does not.
- Between two that reach it, the one that does so more directly, correctly and \
helpfully scores higher.
- Score differences should match quality differences: small gaps for slightly \
better, large gaps for much better.
- Partial progress toward the goal earns partial credit."""

_INSTRUCTIONS = """\
You are judging trajectories that were all given the same goal. Read each one \
and give it a score between 0 and 1 (1 is best) with a short explanation \
(one sentence). \
Compare the trajectories with one another: what matters is that better \
trajectories get higher scores. Infer the goal from the context. Answer in JSON: \
{{"scores": [{{"trajectory_id": "1", "explanation": "...", "score": 0.0}}, ...]}}

Grading standards:
{rubric}"""

_ANSWER_IN_PROMPT = """\
Answer with only a JSON object, no other text, of exactly this form, with one \
entry per trajectory id and each score between 0 and 1:
{{"scores": [{{"trajectory_id": "1", "explanation": "...", "score": 0.0}}]}}
The JSON schema of the answer: {schema}"""


def validate_trajectories(trajectories: Sequence[Sequence[Message]]) -> None:
    """Check the input of ``RulerJudge.score_group`` (``engine.rewards.judge.ruler``).

    Raises:
        ValueError: the group is empty, a trajectory is empty, or a message is
            not a dict with a ``role`` (OpenAI-style messages are expected).
    """
    if not trajectories:
        raise ValueError("score_group needs at least one trajectory; got an empty group")
    for i, trajectory in enumerate(trajectories):
        if isinstance(trajectory, (str, bytes)) or not trajectory:
            raise ValueError(
                f"trajectory {i} must be a non-empty list of message dicts, got {trajectory!r:.80}"
            )
        for j, message in enumerate(trajectory):
            if not isinstance(message, Mapping) or "role" not in message:
                raise ValueError(
                    f"trajectory {i}, message {j} must be a dict with 'role' and 'content', "
                    f"got {message!r:.80}"
                )


def shared_prefix_length(trajectories: Sequence[Sequence[Message]]) -> int:
    """Number of leading messages all trajectories share (compared as dicts).

    Capped at the shortest trajectory's length minus one, so every trajectory
    keeps at least its last message in its own tagged part.
    """
    limit = min(len(t) for t in trajectories) - 1
    n = 0
    while n < limit and all(t[n] == trajectories[0][n] for t in trajectories):
        n += 1
    return n


def _as_lines(messages: Sequence[Message]) -> str:
    return "\n".join(json.dumps(dict(m), ensure_ascii=False) for m in messages)


def build_judge_messages(
    trajectories: Sequence[Sequence[Message]], rubric: str, *, answer_in_prompt: bool
) -> list[Message]:
    """The judge's chat messages for one group (RULER's prompt layout).

    A system message holds the instructions (with the answer's JSON form, for
    servers that silently ignore ``response_format``) and the rubric; the user
    message holds the shared leading messages once in ``<context>``, then each
    trajectory's remainder in ``<trajectory id="k">`` (k = 1..G, input order),
    one JSON message per line. With ``answer_in_prompt`` the user message also
    demands JSON only and gives its full schema (for servers that refuse the
    JSON-schema response format).
    """
    prefix = shared_prefix_length(trajectories)
    parts = []
    if prefix:
        parts.append(f"<context>\n{_as_lines(trajectories[0][:prefix])}\n</context>")
    parts.append("Trajectories:")
    for k, trajectory in enumerate(trajectories, start=1):
        parts.append(f'<trajectory id="{k}">\n{_as_lines(trajectory[prefix:])}\n</trajectory>')
    if answer_in_prompt:
        schema = json.dumps(answer_schema(len(trajectories)), separators=(",", ":"))
        parts.append(_ANSWER_IN_PROMPT.format(schema=schema))
    return [
        {"role": "system", "content": _INSTRUCTIONS.format(rubric=rubric)},
        {"role": "user", "content": "\n\n".join(parts)},
    ]
