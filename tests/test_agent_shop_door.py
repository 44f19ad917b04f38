"""examples/agents/shop_agent shows the policy what examples/tasks/shop_agent shows it (issue 56).

The same replies are played through the native tool loop (``ToolEpisode`` over
tools.py) and through the user's ``rollout.py`` (a client that answers as the
endpoint does: the calls parsed from ``<tool_call>`` blocks into ``tool_calls``,
a malformed block left in the text); every prompt each path renders for the
task's tiny policy, and the final conversation, must be the same text.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message_function_tool_call import ChatCompletionMessageFunctionToolCall, Function

from rlab.engine.agent.request import chat_messages
from rlab.engine.policy.tiny import build_tokenizer
from rlab.engine.tools.calls import parse_turn
from rlab.engine.tools.episode import ToolEpisode
from rlab.engine.tools.process import ToolProcess
from rlab.engine.tools.render import tool_prompt
from rlab.scenarios.task_file import load_task

ROOT = Path(__file__).resolve().parents[1]
NATIVE, AGENT = ROOT / "examples" / "tasks" / "shop_agent", ROOT / "examples" / "agents" / "shop_agent"


def _call(name: str, arguments: object) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


SCRIPTS = {
    "lookup and multiply": [_call("price", {"item": "book"}), _call("multiply", {"a": 3, "b": 12}), "36"],
    "a guess": ["About 20 euros."],
    "a tool raises": [_call("price", {"item": "books"}), _call("price", {"item": "book"}), "36"],
    "bad arguments, lax ones": [_call("multiply", {"a": "x", "b": 2}), _call("multiply", {"a": "3", "b": 12.0}),
                                _call("multiply", {"a": 3}), "36"],
    "malformed calls, the turn limit": ['<tool_call>\n{"name": "price", "ar',
                                        '<tool_call>\n{"name": price}\n</tool_call>',
                                        _call("foo", {}), _call("price", {"item": "rug"})],
    "two calls in a turn": ["x " + _call("price", {"item": "book"}) + "\n" + _call("multiply", {"a": 3, "b": 12}),
                            "36"],
    "a block of two, one unnamed": ['<tool_call>\n[{"name": "price", "arguments": {"item": "book"}}, {"nme": 1}]\n'
                                    "</tool_call>", "36"],
}


@pytest.fixture(scope="module")
def tools():
    process = ToolProcess(NATIVE / "tools.py")
    yield process
    process.close()


@pytest.fixture(scope="module")
def rollout_module():
    spec = importlib.util.spec_from_file_location("shop_rollout", AGENT / "rollout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _renderer():
    tokenizer = build_tokenizer(tools=True)

    def render(messages, schemas):
        shown, offered = tool_prompt(messages, schemas, tokenizer.chat_template)
        return tokenizer.apply_chat_template(shown, tools=offered, add_generation_prompt=True, tokenize=False)

    return render


class _Endpoint:
    """Answers as the engine's endpoint does (engine.agent.session), with scripted texts."""

    def __init__(self, texts: list[str], render) -> None:
        self.texts, self.render, self.prompts = texts, render, []

    async def create(self, model, messages, tools):
        shown = chat_messages(json.loads(json.dumps(messages)))
        self.prompts.append(self.render(shown, tools))
        turn = len(self.prompts) - 1
        parsed = parse_turn(self.texts[turn])
        calls = [ChatCompletionMessageFunctionToolCall(
            id=f"call_{turn}_{k}", type="function",
            function=Function(name=c.name, arguments=json.dumps(c.arguments, ensure_ascii=False)))
            for k, c in enumerate(c for c in parsed.calls if c.name and c.problem is None)]
        completion = ChatCompletion(id="x", object="chat.completion", created=0, model=model, choices=[Choice(
            index=0, finish_reason="tool_calls" if calls else "stop",
            message=ChatCompletionMessage(role="assistant", content=parsed.content, tool_calls=calls or None))])
        return ChatCompletion.model_validate(completion.model_dump(mode="json", exclude_none=True))


def test_the_rollout_offers_the_native_tools(tools, rollout_module):
    assert rollout_module.TOOLS == tools.schemas
    task = load_task(AGENT)
    assert rollout_module.SYSTEM == task.system_prompt == load_task(NATIVE).system_prompt
    assert rollout_module.MAX_TURNS == task.max_turns


def test_the_agent_task_shares_the_native_tiny_policy():
    from rlab.engine.policy.tiny import scenario_model_key

    assert scenario_model_key(load_task(AGENT), 1) == scenario_model_key(load_task(NATIVE), 1)


@pytest.mark.parametrize("name", list(SCRIPTS))
def test_both_doors_render_the_same_prompts(name, tools, rollout_module):
    texts, render = SCRIPTS[name], _renderer()
    example = {"id": "3-book", "prompt": "How much do 3 books cost?", "answer": "36"}
    episode = ToolEpisode(tools)
    observation, _ = episode.reset(example)
    native = [{"role": "system", "content": rollout_module.SYSTEM}, *observation]
    native_prompts = []
    for text in texts[:rollout_module.MAX_TURNS]:
        native_prompts.append(render(native, tools.schemas))
        answers, _, done, _ = episode.step(text)
        native += [episode.last_message, *answers]
        if done:
            break
    endpoint = _Endpoint(texts, render)
    client = SimpleNamespace(chat=SimpleNamespace(completions=endpoint))
    returned = asyncio.run(rollout_module.rollout(client, "rlab-policy", example))
    assert endpoint.prompts == native_prompts
    assert render(chat_messages(returned), tools.schemas) == render(native, tools.schemas)
