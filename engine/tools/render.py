"""The prompt with its tools: the model's chat template, or the one documented convention.

Where the chat template renders tools itself (Qwen, Hermes, Llama 3.1 and
the tool scenarios' tiny policies: it reads ``tools`` and ``tool_calls``),
the messages go to ``apply_chat_template(tools=...)`` as they are, with the
calls' arguments as objects (transformers' convention).

Where it does not (SmolLM2, the tiny policies of the other scenarios), the
messages are rewritten first, by the Hermes / Qwen 2.5 convention
(docs/tasks.md, "Tools"):

- the system message (one is added if there is none) ends with
  :data:`TOOLS_HEADER`, one JSON schema per line inside ``<tools>``, and
  :data:`TOOLS_FOOTER`, which shows the call format of ``engine.tools.calls``;
- an assistant message's calls are written back into its text, each as
  :func:`~rlab.engine.tools.calls.call_text`, after its content;
- each run of ``tool`` messages becomes one ``user`` message holding each
  result inside ``<tool_response>`` tags.
"""

from __future__ import annotations

import json
from typing import Any

from rlab.engine.tools.calls import call_text, template_messages
from rlab.engine.types import Message

TOOLS_HEADER = ("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                "You are provided with function signatures within <tools></tools> XML tags:\n<tools>")
TOOLS_FOOTER = ("</tools>\n\nFor each function call, return a json object with function name and arguments "
                "within <tool_call></tool_call> XML tags:\n<tool_call>\n"
                '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>')


def supports_tools(chat_template: str | None) -> bool:
    """Whether a chat template renders tools and calls itself (it reads ``tools`` and ``tool_calls``)."""
    return bool(chat_template) and "tools" in chat_template and "tool_calls" in chat_template  # type: ignore[operator]


def tool_prompt(messages: list[Message], tools: list[dict[str, Any]] | None,
                chat_template: str | None) -> tuple[list[Message], list[dict[str, Any]] | None]:
    """(messages, tools) to hand ``apply_chat_template`` for a template ``chat_template``.

    Without tools the messages are returned as they are. With tools, a
    template that supports them gets both (arguments as objects); any other
    gets the convention's messages and no tools.
    """
    if not tools:
        return messages, None
    if supports_tools(chat_template):
        return template_messages(messages), tools
    return convention_messages(messages, tools), None


def convention_messages(messages: list[Message], tools: list[dict[str, Any]]) -> list[Message]:
    """``messages`` rewritten by the module's convention for a template without tools."""
    block = "\n".join([TOOLS_HEADER, *(json.dumps(t, ensure_ascii=False) for t in tools), TOOLS_FOOTER])
    out: list[Message] = []
    if not messages or messages[0].get("role") != "system":
        out.append({"role": "system", "content": block})
    responses: list[str] = []
    for i, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            responses.append(f"<tool_response>\n{message.get('content') or ''}\n</tool_response>")
            if i + 1 == len(messages) or messages[i + 1].get("role") != "tool":
                out.append({"role": "user", "content": "\n".join(responses)})
                responses = []
        elif role == "system" and i == 0:
            out.append({"role": "system", "content": f"{message.get('content') or ''}\n\n{block}"})
        elif role == "assistant" and message.get("tool_calls"):
            out.append({"role": "assistant", "content": assistant_text(message)})
        else:
            out.append(message)
    return out


def assistant_text(message: Message) -> str:
    """An assistant message's text with its calls written back: its content, then each call's
    canonical text on its own line (what the policy wrote, when it wrote the canonical form)."""
    calls = [call_text(c["function"]["name"], _arguments(c["function"].get("arguments")))
             for c in message.get("tool_calls") or []]
    content = message.get("content") or ""
    return "\n".join(([content] if content else []) + calls)


def _arguments(raw: Any) -> Any:
    return json.loads(raw) if isinstance(raw, str) else raw
