"""The judge's answer: the schema it must follow, and how its text is read.

The answer is ``{"scores": [{"trajectory_id": "1", "explanation": "...",
"score": 0.0}, ...]}``, one entry per trajectory. :func:`response_format`
sends the schema pinned to the group; :func:`parse_answer` reads the text
back: the JSON is found amid prose, entries are matched by trajectory_id
(never by position) and out-of-range scales are rescaled by a fixed rule
(:func:`normalize_scores`). Anything unusable raises
:class:`JudgeAnswerError`, which the judge retries.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rlab.engine.validation import located, one_line

#: Longest explanation the JSON schema allows, characters: a small local
#: judge left unbounded wrote 1,500-2,400 tokens per group and was cut off
#: mid-explanation (issue 14).
EXPLANATION_MAX_CHARS = 200
#: Answer tokens allowed per trajectory: the explanation at a pessimistic
#: 2 characters per token plus ~40 tokens of JSON keys, id, score and
#: whitespace (vLLM's guided JSON lets the model indent); see :func:`answer_token_budget`.
TOKENS_PER_TRAJECTORY = EXPLANATION_MAX_CHARS // 2 + 40


class ScoredTrajectory(BaseModel):
    """The score of one trajectory (the docstrings and descriptions of these
    models go to the judge inside the JSON schema)."""

    model_config = ConfigDict(json_schema_extra={"additionalProperties": False})

    trajectory_id: str = Field(description="The id of the trajectory, as tagged.")
    explanation: str = Field(description="A short reason for the score.")
    score: float = Field(description="Between 0 and 1; higher is better.")

    @field_validator("trajectory_id", mode="before")
    @classmethod
    def _id_as_text(cls, value: Any) -> Any:
        # Judges often answer 1 for "1"; ids are compared as stripped text.
        return str(value).strip() if isinstance(value, (int, str)) else value


class JudgeAnswer(BaseModel):
    """One score per trajectory of the group."""

    model_config = ConfigDict(json_schema_extra={"additionalProperties": False})

    scores: list[ScoredTrajectory]


class JudgeAnswerError(ValueError):
    """The judge's text is not a usable answer (retried by ``engine.rewards.judge.ruler.RulerJudge``)."""


def answer_schema(group_size: int) -> dict[str, Any]:
    """The JSON schema of a :class:`JudgeAnswer` for a group of ``group_size``.

    Tighter than the model's own schema, so a server that enforces it
    (vLLM's structured outputs, llama.cpp's grammar, Ollama's ``format``)
    cannot ramble: exactly ``group_size`` entries, ids from "1" to
    "group_size", scores in [0, 1], explanations at most
    :data:`EXPLANATION_MAX_CHARS` characters.
    """
    schema = JudgeAnswer.model_json_schema()
    entry = schema["$defs"]["ScoredTrajectory"]["properties"]
    entry["trajectory_id"]["enum"] = [str(k) for k in range(1, group_size + 1)]
    entry["explanation"]["maxLength"] = EXPLANATION_MAX_CHARS
    entry["score"].update(minimum=0, maximum=1)
    schema["properties"]["scores"].update(minItems=group_size, maxItems=group_size)
    return schema


def response_format(group_size: int) -> dict[str, Any]:
    """The ``response_format`` asking for :func:`answer_schema` (``group_size`` entries).

    ``strict`` is off: OpenAI's and Azure's strict mode refuse keywords such
    as ``maxLength``, while vLLM, llama.cpp and Ollama enforce the schema
    whatever the flag says.
    """
    return {
        "type": "json_schema",
        "json_schema": {
            "name": "ruler_scores",
            "strict": False,
            "schema": answer_schema(group_size),
        },
    }


def answer_token_budget(group_size: int) -> int:
    """``max_tokens`` of a judge call: 64 + :data:`TOKENS_PER_TRAJECTORY` per trajectory.

    Enough for the schema's longest answer; it bounds what a judge that
    ignores the schema (or answers in prose first) can spend per group.
    """
    return 64 + TOKENS_PER_TRAJECTORY * group_size


def extract_json_object(text: str) -> dict[str, Any]:
    """The last JSON object in ``text`` that has a ``scores`` key.

    Tolerates prose, code fences and reasoning before or after the JSON: every
    ``{`` is tried with ``json.JSONDecoder.raw_decode``; the last decodable
    object wins because reasoning comes before the final answer.

    Raises:
        JudgeAnswerError: no such object in ``text``.
    """
    decoder = json.JSONDecoder()
    found = None
    pos = text.find("{")
    while pos != -1:
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            pos = text.find("{", pos + 1)
            continue
        if isinstance(value, dict) and "scores" in value:
            found = value
            pos = text.find("{", end)
        else:
            pos = text.find("{", pos + 1)
    if found is None:
        raise JudgeAnswerError(f"no JSON object with 'scores' in the answer: {text[:200]!r}")
    return found


def normalize_scores(scores: Sequence[float]) -> tuple[list[float], int]:
    """Bring a group's scores into [0, 1]; returns (scores, scale).

    The rule (applied to the whole group, so the ranking never changes):
    all scores in [0, 1] -> kept (scale 1); else all in [0, 10] -> divided by
    10 (a 0-10 scale); else all in [0, 100] -> divided by 100 (a percentage).
    A group whose scores are all in [0, 1] is always read as scale 1, even if
    the judge meant 0-10 and gave only 0s and 1s.

    Raises:
        JudgeAnswerError: a score is negative, above 100, NaN or infinite.
    """
    bad = [s for s in scores if not math.isfinite(s) or s < 0 or s > 100]
    if bad:
        raise JudgeAnswerError(f"scores must be in [0, 1] (or a 0-10/0-100 scale); got {bad}")
    top = max(scores, default=0.0)
    scale = 1 if top <= 1 else 10 if top <= 10 else 100
    return [s / scale for s in scores], scale


def parse_answer(text: str | None, ids: Sequence[str]) -> tuple[list[float], list[str], int]:
    """Scores and explanations in the order of ``ids``, and the scale used.

    Entries are matched by trajectory_id, never by position.

    Raises:
        JudgeAnswerError: no JSON answer, wrong shape, an empty ``scores``
            list, a missing, unknown or repeated id, or an out-of-range score.
    """
    if not text:
        raise JudgeAnswerError("the judge returned no text")
    try:
        answer = JudgeAnswer.model_validate(extract_json_object(text))
    except ValidationError as exc:
        # a long group breaks a rule once per entry: three name the mistake, the rest are counted
        raise JudgeAnswerError(f"answer does not match the schema: {one_line(exc, located, most=3)}") from exc
    if not answer.scores:
        raise JudgeAnswerError('the judge returned an empty list ({"scores": []})')
    by_id: dict[str, ScoredTrajectory] = {}
    for entry in answer.scores:
        if entry.trajectory_id in by_id:
            raise JudgeAnswerError(f"trajectory_id {entry.trajectory_id!r} is scored twice")
        by_id[entry.trajectory_id] = entry
    missing = [i for i in ids if i not in by_id]
    unknown = sorted(set(by_id) - set(ids))
    if missing or unknown:
        raise JudgeAnswerError(f"trajectory ids missing: {missing}, unknown: {unknown}")
    scores, scale = normalize_scores([by_id[i].score for i in ids])
    return scores, [by_id[i].explanation for i in ids], scale
