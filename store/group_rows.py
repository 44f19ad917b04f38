"""A group with its trajectories, turns and tool calls as rows: scrubbed, capped, inserted.

The hot path of the run file (>= 20k trajectories/s): raw executes on the
connection, inside the caller's transaction (``store.writer``). Every text
is scrubbed of credentials, since a judge or environment may echo a key, and
long errors and details are capped (``store.limits``).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from rlab.store.limits import TEXT_CHARS, cap_details, cap_text
from rlab.store.records import GroupRecord, TrajectoryRecord
from rlab.store.rows import dumps, insert_row
from rlab.store.secrets import needs_scrub, scrub, scrub_text, secret_env_values
from rlab.store.tokens import pack, pack_logprobs

_INSERT_GROUP = (
    'INSERT INTO "groups" (run_id, step, idx, example_id, prompt, initial_state_key, '
    "judge_status, judge_error, example) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_TRAJECTORY = (
    "INSERT INTO trajectories (group_id, run_id, step, idx, messages, completion, "
    "prompt_tokens, completion_tokens, reward, components, details, parse_status, advantage, "
    "reward_version, judge_score, judge_rank, judge_explanation, truncated, success, token_ends, "
    "token_logprobs, token_policy_logprobs, tool_calls) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_TURN = (
    "INSERT INTO turns (trajectory_id, run_id, step, t, state_key, reward, ret, adv_episode, "
    "adv_step, advantage, anchor_id, anchor_size, env_reward) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_INSERT_TOOL_CALL = (
    "INSERT INTO tool_calls (trajectory_id, run_id, step, turn, idx, call_id, name, arguments, result, error, "
    "seconds) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def insert_group(conn: sqlite3.Connection, run_id: int, step: int, group: GroupRecord) -> int:
    """Insert ``group`` of step ``step`` with its trajectories, turns and tool calls; its id.

    Raises:
        ValueError: a messages, components, details or arguments value is not
            JSON-serialisable (the caller's transaction is then rolled back).
    """
    # executemany when no turn needs its trajectory's id, one execute per trajectory otherwise
    secrets = secret_env_values()
    group_id = insert_row(conn, _INSERT_GROUP, (
        run_id, step, group.index, _text(group.example_id, secrets), _text(group.prompt, secrets),
        _text(_state_key(group.initial_state_key), secrets), group.judge_status,
        error_text(group.judge_error, secrets),
        None if group.example is None else json_value(group.example, "example", secrets),
    ))
    rows = [_trajectory_row(run_id, step, group_id, t, secrets) for t in group.trajectories]
    if not any(t.turns or t.tool_calls for t in group.trajectories):
        conn.executemany(_INSERT_TRAJECTORY, rows)
        return group_id
    for trajectory, row in zip(group.trajectories, rows):
        trajectory_id = insert_row(conn, _INSERT_TRAJECTORY, row)
        if trajectory.turns:
            conn.executemany(_INSERT_TURN, [
                (trajectory_id, run_id, step, turn.t, _state_key(turn.state_key),
                 turn.reward, turn.ret, turn.adv_episode, turn.adv_step, turn.advantage,
                 turn.anchor_id, turn.anchor_size, turn.env_reward)
                for turn in trajectory.turns
            ])
        if trajectory.tool_calls:
            conn.executemany(_INSERT_TOOL_CALL, [
                (trajectory_id, run_id, step, call.turn, call.index, call.call_id, _text(call.name, secrets),
                 json_value(call.arguments, "tool call arguments", secrets), _text(call.result, secrets),
                 error_text(call.error, secrets), call.seconds)
                for call in trajectory.tool_calls
            ])
    return group_id


def _trajectory_row(run_id: int, step: int, group_id: int, t: TrajectoryRecord,
                    secrets: list[str]) -> tuple:
    return (
        group_id, run_id, step, t.index, json_value(t.messages, "messages", secrets),
        _text(t.completion, secrets), t.prompt_tokens, t.completion_tokens, t.reward,
        json_value(t.components, "components", secrets), _details(t.details, secrets),
        _text(_parse_status(t.details), secrets), t.advantage, t.reward_version,
        t.judge_score, t.judge_rank, _text(t.judge_explanation, secrets), int(t.truncated),
        None if t.success is None else int(t.success),
        *(pack(t.token_ends, t.logprobs) if t.logprobs is not None else (None, None)),
        None if t.policy_logprobs is None else pack_logprobs(t.policy_logprobs),
        None if t.tool_calls is None else len(t.tool_calls),
    )


def _state_key(value: Any) -> str | None:
    return None if value is None else str(value)


def _parse_status(details: dict) -> str | None:
    """``details["parse_status"]``, else the first rubric function's one."""
    status = details.get("parse_status")
    if status is None:
        for value in details.values():
            if isinstance(value, dict) and "parse_status" in value:
                return value["parse_status"]
    return status


def _text(value: Any, secrets: list[str]) -> Any:
    """A text column's value, scrubbed of credentials (non-strings as they are)."""
    if not isinstance(value, str) or not needs_scrub(value, secrets):
        return value
    return scrub_text(value, secrets)


def json_value(value: Any, what: str, secrets: list[str]) -> str:
    """A JSON column's text; values re-dumped scrubbed only when the cheap
    test finds a possible credential (the hot path stays one ``dumps``)."""
    text = dumps(value, what)
    return dumps(scrub(value, secrets), what) if needs_scrub(text, secrets) else text


def error_text(value: str | None, secrets: list[str]) -> str | None:
    """An error text as stored: scrubbed, then capped (``store.limits``). Scrubbed first, so
    a cut never leaves the first part of a key that scrubbing would no longer know."""
    return None if value is None else cap_text(_text(value, secrets))


def _details(details: dict, secrets: list[str]) -> str:
    """A trajectory's details as stored: scrubbed, then capped (``store.limits``)."""
    text = json_value(details, "details", secrets)
    return text if len(text) <= TEXT_CHARS else dumps(cap_details(json.loads(text)), "details")
