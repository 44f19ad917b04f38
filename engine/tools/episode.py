"""The tool loop as an environment: each assistant turn's calls run, their results come back.

A :class:`ToolEpisode` is one episode of a tool task (an
:class:`~rlab.engine.types.ToolEnvironment`), played by the multi-turn
runner (``engine.rollout.episodes``) like any other environment:

- ``reset``: the example's prompt as the first user message(s);
- ``step(text)``: the turn's calls (``engine.tools.calls``) run in the tool
  process one after another; their results (or errors) come back as
  ``tool`` messages and the episode goes on. A turn without a call is the
  answer: the episode ends there (or at the scenario's ``max_turns``, where
  the runner marks it truncated).

Rewards are the rubric's (it reads the whole conversation; the environment
pays 0 per turn). ``invalid`` marks a turn with a call the environment could
not apply (malformed, an unknown tool, bad arguments). The state key, GiGPO's
anchor state, is a hash of the conversation so far as the tools saw it: the
calls made and what came back, so episodes that made the same calls share an
anchor however they worded the turns around them.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from rlab.engine.tools.calls import FORMAT_HINT, answer_messages, assistant_message, parse_turn
from rlab.engine.tools.process import ToolProcess
from rlab.engine.tools.worker import POLICY_ERRORS
from rlab.engine.types import Example, Message, ToolCall

#: What a call in a run without tools (``--no-tools``) is told.
NO_TOOLS = "no tools are offered in this run; answer without a call"


def prompt_messages(example: Example) -> list[Message]:
    """The example's prompt as chat messages (a text is one user message)."""
    prompt = example["prompt"]
    return list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}]


class ToolEpisode:
    """One episode of a tool task.

    Args:
        tools: the run's tool process, or None when the run offers no tools
            (every call is then answered with :data:`NO_TOOLS`).
    """

    def __init__(self, tools: ToolProcess | None) -> None:
        self.tools = tools
        self.invalid = False
        self.last_message: Message = {"role": "assistant", "content": ""}
        self.last_calls: list[ToolCall] = []
        self._history: list[list[Any]] = []
        self._turn = 0

    def reset(self, example: Example) -> tuple[list[Message], str]:
        """The prompt's messages and the initial state key (no calls yet)."""
        self.invalid, self._history, self._turn = False, [], 0
        return prompt_messages(example), self._key()

    def step(self, action: str) -> tuple[list[Message], float, bool, str]:
        """Run the turn's calls; (tool messages, 0.0, done: the turn made no call, state key)."""
        parsed = parse_turn(action)
        self.last_calls = [self._run(f"call_{self._turn}_{k}", c.name, c.arguments, c.problem)
                           for k, c in enumerate(parsed.calls)]
        self._turn += 1
        self.invalid = any(c.problem is not None for c in parsed.calls) or any(
            c.kind in POLICY_ERRORS for c in self.last_calls)
        self.last_message = assistant_message(parsed.content, self.last_calls)
        self._history += [[c.name, c.arguments, c.result, c.error] for c in self.last_calls]
        return answer_messages(self.last_calls), 0.0, not parsed.calls, self._key()

    def _run(self, call_id: str, name: str, arguments: dict[str, Any], problem: str | None) -> ToolCall:
        if problem is not None:
            return ToolCall(call_id, name, arguments, error=f"{problem}; {FORMAT_HINT}")
        if self.tools is None:
            return ToolCall(call_id, name, arguments, error=NO_TOOLS)
        return self.tools.call(call_id, name, arguments)

    def _key(self) -> str:
        text = json.dumps(self._history, sort_keys=True, ensure_ascii=False, default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
