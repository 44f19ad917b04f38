"""Tool calls in an assistant's text, and the OpenAI-format messages of a tool turn.

The policy calls a tool by writing, anywhere in its turn, the Hermes / Qwen
convention (docs/tasks.md, "Tools")::

    <tool_call>
    {"name": "multiply", "arguments": {"a": 4821, "b": 377}}
    </tool_call>

One block holds one call (a JSON object) or several (a JSON list of them,
as SmolLM2 writes them); ``arguments`` may be an object or a JSON string of
one. A block that does not parse is a malformed call: the policy is told why
and what to write instead, and the episode goes on. A turn without a block
is the episode's answer, unless the whole turn is one bare JSON object of a
``name`` and ``parameters`` (or ``arguments``) and nothing else: Llama 3.1's
template asks for its calls so and writes them back so.

The assistant turn is stored as OpenAI writes it: ``content`` is the text
outside the blocks, ``tool_calls`` the parsed calls (``arguments`` a JSON
string); each call is answered by a ``tool`` message with its
``tool_call_id``. :func:`call_text` is the one canonical text of a call,
which the convention renders back (``engine.tools.render``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from rlab.engine.types import Message, ToolCall
from rlab.store.records import TOOL_ERROR_PREFIX

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)(?:" + re.escape(CLOSE) + r"|\Z)", re.DOTALL)

#: The keys of a bare call, Llama 3.1's ``{"name": ..., "parameters": {...}}`` (or ``arguments``).
_BARE_KEYS = ({"name", "parameters"}, {"name", "arguments"})

#: What the policy is told to write after a malformed call.
FORMAT_HINT = f'write {OPEN}{{"name": TOOL, "arguments": {{...}}}}{CLOSE}'


@dataclass(frozen=True)
class ParsedCall:
    """One call as written: the tool's name and arguments, or why it does not parse.

    name: the tool named ("" when the block did not parse that far).
    arguments: the arguments object ({} when it did not parse).
    problem: None for a well-formed call, else why not (for the policy).
    """

    name: str
    arguments: dict[str, Any]
    problem: str | None = None


@dataclass(frozen=True)
class ParsedTurn:
    """An assistant turn split into its text and its calls.

    content: the text outside the well-formed ``<tool_call>`` blocks (a malformed
        block stays, as the policy wrote it), stripped.
    calls: the calls in order (well-formed or not); empty for an answer.
    """

    content: str
    calls: list[ParsedCall] = field(default_factory=list)


def parse_turn(text: str) -> ParsedTurn:
    """Split an assistant's ``text`` into its content and its tool calls.

    A block left open at the end (generation stopped inside it) is a
    malformed call, as is one whose JSON does not parse, is not an object
    (or a list of objects), lacks a string ``name`` or has ``arguments``
    that are not an object. A turn without a block that is one bare call
    object (:func:`_bare_call`) is that call, with no content.
    """
    calls: list[ParsedCall] = []
    kept, end = [], 0
    for match in _BLOCK.finditer(text):
        closed = match.group(0).endswith(CLOSE)
        parsed = (_parse_block(match.group(1)) if closed else
                  [ParsedCall("", {}, f"the tool call was not closed with {CLOSE}")])
        calls.extend(parsed)
        # a well-formed block becomes tool_calls; a malformed one stays in the text, as written
        kept.append(text[end:match.start()] if all(c.problem is None for c in parsed) else text[end:match.end()])
        end = match.end()
    bare = None if calls else _bare_call(text)
    if bare is not None:
        return ParsedTurn("", [bare])
    return ParsedTurn(("".join(kept) + text[end:]).strip(), calls)


def _bare_call(text: str) -> ParsedCall | None:
    """The call of a turn that is one JSON object of ``name`` and ``parameters`` (or
    ``arguments``) and nothing else, as Llama 3.1 writes one; else None, the turn being an
    answer (an object of other keys, or with text around it, is no call)."""
    stripped = text.strip()
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return None
    value, problem = _loads(stripped)
    if problem is not None or not isinstance(value, dict) or set(value) not in _BARE_KEYS:
        return None
    return _parse_call(value)


def _parse_block(body: str) -> list[ParsedCall]:
    value, problem = _loads(body)
    if problem is not None:
        return [ParsedCall("", {}, f"the tool call {problem}")]
    items = value if isinstance(value, list) and value else [value]
    return [_parse_call(item) for item in items]


def _loads(text: str) -> tuple[Any, str | None]:
    """``text``'s JSON value and None, or None and why Python cannot take it (a phrase after a
    subject): the call's block and an ``arguments`` string alike, since the policy writes both.
    Legal JSON is refused too when it nests past Python's stack (a BPE token holds many '['),
    holds an integer past 4,300 digits, or a lone surrogate escape (``"\\ud800"``, which no
    hash, file or store can take)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as err:
        return None, f"is not valid JSON ({_where(err)})"
    except RecursionError:
        return None, "nests its JSON too deeply"
    except ValueError as err:  # json's own limits, e.g. Python's int-string one
        return None, f"holds JSON that cannot be read ({str(err).split(';')[0]})"
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return None, "holds a lone surrogate escape (such as \\ud800), which is not text"
    return value, None


def _where(err: json.JSONDecodeError) -> str:
    """json's message and position in one phrase ("Unterminated string starting at" ends in "at")."""
    return f"{err.msg.removesuffix(' at')} at character {err.pos}"


def _parse_call(item: Any) -> ParsedCall:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
        return ParsedCall("", {}, 'the tool call has no "name" string')
    arguments = item.get("arguments", item.get("parameters", {}))
    if isinstance(arguments, str) and arguments.strip():
        arguments, problem = _loads(arguments)
        if problem is not None:
            return ParsedCall(item["name"], {}, f'"arguments" is a string that is not a JSON object: it {problem}')
    elif isinstance(arguments, str):
        arguments = {}
    if not isinstance(arguments, dict):
        return ParsedCall(item["name"], {}, f'"arguments" must be an object, got {type(arguments).__name__}')
    return ParsedCall(item["name"], arguments)


def call_text(name: str, arguments: dict[str, Any]) -> str:
    """The canonical text of one call: what the convention renders and the tiny policies write."""
    return f"{OPEN}\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n{CLOSE}"


def assistant_message(content: str, calls: list[ToolCall]) -> Message:
    """The turn as an OpenAI assistant message: its content and its well-formed calls
    (``arguments`` a JSON string); a malformed call has no entry (it has no tool to name)."""
    message: Message = {"role": "assistant", "content": content}
    named = [c for c in calls if c.name]
    if named:
        message["tool_calls"] = [{"id": c.id, "type": "function",
                                  "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
                                 for c in named]
    return message


def answer_messages(calls: list[ToolCall]) -> list[Message]:
    """What the policy sees after its calls: one ``tool`` message per named call (its
    result, or ``error: ...``), and one ``user`` message per malformed call (it named no
    tool a ``tool`` message could answer)."""
    out: list[Message] = []
    for call in calls:
        text = f"{TOOL_ERROR_PREFIX}{call.error}" if call.error is not None else call.result
        if call.name:
            out.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": text})
        else:
            out.append({"role": "user", "content": text})
    return out


def template_messages(messages: list[Message]) -> list[Message]:
    """``messages`` as chat templates read them: tool-call ``arguments`` as objects, not JSON strings
    (transformers' convention; OpenAI's is the string the run file keeps)."""
    out = []
    for message in messages:
        if message.get("tool_calls"):
            calls = [{**c, "function": {**c["function"], "arguments": call_arguments(c["function"].get("arguments"))}}
                     for c in message["tool_calls"]]
            message = {**message, "tool_calls": calls}
        out.append(message)
    return out


def call_arguments(arguments: Any) -> Any:
    """A call's ``arguments`` as an object: OpenAI's JSON string parsed, anything else (an
    object already, or a string that is not JSON) as it is."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    return arguments
