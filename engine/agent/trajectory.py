"""A recorded rollout as a trajectory: the turns as sampled, the conversation as returned.

Each completion the endpoint sampled for a rollout is one
:class:`~rlab.engine.types.Turn`: the prompt's token ids as rendered for that
request, the sampled ids and their log-probs as sampled. The conversation the
rollout returned is the trajectory's ``messages``: what the rubric, the
judge and the success rule read, as for any tool task. The agent's tool
messages answer the calls of the turn whose ids they name.

What does not add up is named, never hidden:

- an assistant message the agent sent back (in a later request, or in the
  returned conversation) that differs from the reply it got is a rewrite:
  the turn still trains on what was sampled, and the trajectory's notes say
  which turn was rewritten;
- an assistant message that answers no sampled reply at all (beyond the
  first request's own messages, e.g. few-shot examples) was never sampled:
  the trajectory is an error;
- so is a rollout that raised, timed out, returned garbage, had a request
  refused (another model name, over the token budget, too many requests) or
  never called the endpoint.

An error trajectory keeps its recorded turns and is scored 0
(``engine.rewards.scoring``), so its group still trains on the others and
the policy learns that what it sampled there led nowhere; the step counts
errors by kind (``agent/errors``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from rlab.engine.agent.process import RolloutResult
from rlab.engine.agent.request import chat_messages
from rlab.engine.agent.session import RecordedTurn, RolloutRecord
from rlab.engine.tools.calls import call_arguments
from rlab.engine.rollout.token_ends import token_ends
from rlab.engine.types import Message, ToolCall, Trajectory, Turn
from rlab.store.records import TOOL_ERROR_PREFIX


def agent_trajectory(record: RolloutRecord, result: RolloutResult, tokenizer: Any) -> Trajectory:
    """The trajectory of one rollout (its error and notes set when something does not add up)."""
    returned = _returned(result)
    conversation = returned if returned is not None else _last_conversation(record)
    rewrites, unsampled = _check(record, returned)
    turns = [_turn(t, conversation, tokenizer) for t in record.turns]
    if turns and result.reward is not None:
        turns[-1].reward = result.reward  # the agent's own reward, as the environment's (env_reward)
    return Trajectory(messages=conversation, initial_state_key=state_key(_prompt(record, conversation)),
                      turns=turns, done=True, truncated=any(t.truncated for t in turns),
                      tools=any(t.tools for t in record.turns),
                      error=_error(record, result, returned, unsampled),
                      notes=[f"turn {i}: the agent sent back a rewritten reply; the turn trains on what was sampled"
                             for i in rewrites])


def state_key(messages: list[Message]) -> str:
    """GiGPO's anchor state of a conversation: what the world said and which calls were made
    (assistant wording left out, as in ``engine.tools.episode``), hashed to 16 hex chars."""
    seen = [[m["role"], m.get("content", "")] if m["role"] != "assistant" else
            ["assistant", [[c["function"]["name"], c["function"].get("arguments")] for c in m.get("tool_calls", [])]]
            for m in messages]
    return hashlib.sha256(json.dumps(seen, ensure_ascii=False).encode("utf-8")).hexdigest()[:16]


def _returned(result: RolloutResult) -> list[Message] | None:
    if result.messages is None:
        return None
    try:
        return chat_messages(result.messages)
    except ValueError:
        return None


def _last_conversation(record: RolloutRecord) -> list[Message]:
    """Without a returned conversation: the last request's and its reply (what was seen)."""
    if not record.turns:
        return []
    return record.turns[-1].messages + [record.turns[-1].reply]


def _prompt(record: RolloutRecord, conversation: list[Message]) -> list[Message]:
    first = record.turns[0].messages if record.turns else conversation
    return [m for m in first if m["role"] != "assistant"] or first


def _check(record: RolloutRecord, returned: list[Message] | None) -> tuple[list[int], list[str]]:
    """(rewritten turn indices, where unsampled assistant messages were) over every later
    request and the returned conversation."""
    if not record.turns:
        return [], (["the returned conversation"] if returned and any(m["role"] == "assistant" for m in returned)
                    else [])
    prefix = len(record.turns[0].messages)
    replies = [t.reply for t in record.turns]
    rewrites: set[int] = set()
    unsampled: list[str] = []
    sources = [(f"request {k + 1}", t.messages) for k, t in enumerate(record.turns[1:], start=1)]
    for where, messages in sources + ([("the returned conversation", returned)] if returned is not None else []):
        found, missing = _match([m for m in messages[prefix:] if m["role"] == "assistant"], replies)
        rewrites |= found
        unsampled += [where] * missing
    return sorted(rewrites), unsampled


def _match(sent: list[Message], replies: list[Message]) -> tuple[set[int], int]:
    """Match sent assistant messages to sampled replies in order: (rewritten reply indices,
    how many answer no reply)."""
    rewrites, missing, j = set(), 0, 0
    for message in sent:
        same = next((k for k in range(j, len(replies)) if _same(message, replies[k])), None)
        if same is not None:
            j = same + 1
        elif j < len(replies):
            rewrites.add(j)
            j += 1
        else:
            missing += 1
    return rewrites, missing


def _same(a: Message, b: Message) -> bool:
    def calls(m: Message) -> list[Any]:
        return [[c["function"]["name"], call_arguments(c["function"].get("arguments"))] for c in m.get("tool_calls", [])]

    return (a.get("content") or "").strip() == (b.get("content") or "").strip() and calls(a) == calls(b)


def _error(record: RolloutRecord, result: RolloutResult, returned: list[Message] | None,
           unsampled: list[str]) -> str | None:
    """The first thing that makes this rollout an error, as ``kind: message``."""
    if result.error is not None:
        return f"{result.error[0]}: {result.error[1]}"
    if result.messages is not None and returned is None:
        return "bad_return: the returned conversation is not chat messages with text content"
    if record.problems:
        kind, message = record.problems[0]
        return f"{kind}: {message}"
    if not record.turns:
        return "no_request: the rollout never called the endpoint, so nothing the policy sampled is in it"
    if unsampled:
        return (f"unsampled: {len(unsampled)} assistant message(s) in {unsampled[0]} answer no completion the "
                "endpoint sampled for this rollout")
    return None


def _call(call: dict[str, Any], answer: Message | None) -> ToolCall:
    """A sampled call with what the agent's tool message said: a result, or an error when the
    text starts with ``error: `` (the convention the native tool loop writes and an import reads,
    ``store.records.TOOL_ERROR_PREFIX``)."""
    name, arguments = call["function"]["name"], call_arguments(call["function"]["arguments"])
    if answer is None:
        return ToolCall(call["id"], name, arguments, error="the agent sent back no result for this call")
    text = str(answer.get("content", ""))
    if text.startswith(TOOL_ERROR_PREFIX):
        return ToolCall(call["id"], name, arguments, error=text[len(TOOL_ERROR_PREFIX):])
    return ToolCall(call["id"], name, arguments, result=text)


def _turn(turn: RecordedTurn, conversation: list[Message], tokenizer: Any) -> Turn:
    ids = [c["id"] for c in turn.reply.get("tool_calls", [])]
    answers = {m.get("tool_call_id"): m for m in conversation if m["role"] == "tool"}
    calls = [_call(c, answers.get(c["id"])) for c in turn.reply.get("tool_calls", [])]
    calls += [ToolCall(f"malformed_{k}", c.name, c.arguments, error=c.problem)
              for k, c in enumerate(turn.calls) if c.problem is not None]
    return Turn(prompt_ids=turn.prompt_ids, completion_ids=turn.sample.token_ids, logprobs=turn.sample.logprobs,
                text=turn.sample.text, reward=0.0, state_key=state_key(turn.messages),
                observation=[answers[i] for i in ids if i in answers], invalid=any(c.problem for c in turn.calls),
                truncated=turn.sample.truncated, token_ends=token_ends(tokenizer, turn.sample), tool_calls=calls)
