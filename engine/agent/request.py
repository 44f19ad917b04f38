"""What a chat-completions request to the endpoint may hold, checked by pydantic.

The fields OpenAI's chat-completions API defines that change what is sampled
are honoured (``n``, ``max_tokens`` / ``max_completion_tokens``,
``temperature``, ``top_p``, ``stop``, ``seed``, ``tools``, ``tool_choice``,
``logprobs``); fields that only describe the call (``user``, ``metadata``,
``store``, ``parallel_tool_calls``, ...) are accepted and ignored, as vLLM's
server does. ``stream`` is refused: an agent gets the whole completion.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from rlab.engine.types import Message


class ChatRequest(BaseModel):
    """The body of ``POST .../v1/chat/completions`` (OpenAI's chat-completions request)."""

    model_config = ConfigDict(extra="ignore")

    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    n: int = Field(1, ge=1, le=64)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    stop: str | list[str] | None = None
    seed: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=0)
    stream: bool | None = None

    def offered_tools(self) -> list[dict[str, Any]] | None:
        """The tools the prompt shows: none for ``tool_choice="none"``, only the named one for
        ``{"type": "function", "function": {"name": ...}}``. The choice is shown, not forced:
        the policy writes what it writes, and learns from what that earns."""
        if not self.tools or self.tool_choice == "none":
            return None
        if isinstance(self.tool_choice, dict):
            name = (self.tool_choice.get("function") or {}).get("name")
            return [t for t in self.tools if (t.get("function") or {}).get("name") == name] or self.tools
        return self.tools

    def stops(self) -> tuple[str, ...]:
        """The stop strings, as a tuple."""
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


def chat_messages(messages: list[dict[str, Any]]) -> list[Message]:
    """Request messages as the chat template reads them: content parts joined into text,
    ``None`` content as "", only the fields a conversation carries (role, content,
    tool_calls, tool_call_id, name).

    Raises:
        ValueError: a message without a role, or a content part that is not text.
    """
    out: list[Message] = []
    for i, message in enumerate(messages):
        role = message.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            raise ValueError(f"messages[{i}] has role {role!r}; use system, user, assistant or tool")
        kept: Message = {"role": "system" if role == "developer" else role, "content": _text(message.get("content"), i)}
        for key in ("tool_calls", "tool_call_id", "name"):
            if message.get(key):
                kept[key] = message[key]
        out.append(kept)
    return out


def _text(content: Any, i: int) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in ("text", "input_text", "output_text"):
                raise ValueError(f"messages[{i}] has a content part that is not text; send text only")
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise ValueError(f"messages[{i}].content must be text or a list of text parts")
