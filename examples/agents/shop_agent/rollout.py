"""The shop agent as a user writes it: its own loop, its own tools, an OpenAI client.

The same agent as examples/tasks/shop_agent, where the engine runs the tool loop over
``tools.py``. Here nothing of rlab is imported; ``rollout`` is all the engine calls:

- the two tools are plain functions, and ``TOOLS`` their JSON schemas (what
  ``transformers.utils.get_json_schema`` makes of tools.py's signatures and docstrings,
  which the native path shows the policy);
- the loop asks ``client.chat.completions.create`` for a turn, runs the turn's calls,
  answers each with a ``tool`` message (the result, or ``error: ...``), and stops on a
  reply without calls or after ``MAX_TURNS`` turns;
- a call the model wrote but the server could not parse stays in the reply's text; it is
  answered by a user message saying what is wrong and what to write instead.

Its arguments are checked as the native tool process checks them (pydantic's
``validate_call``, lax: "3" is 3), and every result and error reads as there, so the
same policy sees the same conversation whichever door it comes through.
"""

import json
import re

from pydantic import ValidationError, validate_call

SYSTEM = "You are a shop assistant. Look prices up with the tools.\n"
MAX_TURNS = 4

PRICES = {"lamp": 23, "mug": 7, "chair": 41, "desk": 87, "pen": 3, "book": 12, "kettle": 29, "rug": 64}


def price(item: str) -> int:
    if item not in PRICES:
        raise ValueError(f"no item {item!r}; the items: {', '.join(PRICES)}")
    return PRICES[item]


def multiply(a: int, b: int) -> int:
    return a * b


FUNCTIONS = {"price": validate_call(price), "multiply": validate_call(multiply)}
TOOLS = [
    {"type": "function", "function": {
        "name": "price", "description": "The price of one item, in euros.",
        "parameters": {"type": "object",
                       "properties": {"item": {"type": "string", "description": "the item's name, e.g. \"lamp\""}},
                       "required": ["item"]},
        "return": {"type": "integer"}}},
    {"type": "function", "function": {
        "name": "multiply", "description": "Multiply two integers.",
        "parameters": {"type": "object",
                       "properties": {"a": {"type": "integer", "description": "the first factor"},
                                      "b": {"type": "integer", "description": "the second factor"}},
                       "required": ["a", "b"]},
        "return": {"type": "integer"}}},
]


def run_tool(name: str, arguments: str) -> str:
    """One call's answer: the result as text (JSON unless a str), or ``error: ...``."""
    if name not in FUNCTIONS:
        return f"error: no tool named {name!r}; the tools: {', '.join(FUNCTIONS)}"
    try:
        value = FUNCTIONS[name](**json.loads(arguments))
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}"
                             for e in err.errors(include_url=False))
        return f"error: bad arguments for {name}: {problems}"
    except Exception as err:  # the tool's own failure is the model's to read
        return f"error: {name} raised {type(err).__name__}: {err}"
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


# A call is written <tool_call>{"name": ..., "arguments": {...}}</tool_call>; the server returns
# the ones it parsed as tool_calls and leaves any other block in the text.
BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
FORMAT_HINT = 'write <tool_call>{"name": TOOL, "arguments": {...}}</tool_call>'


def unparsed_calls(text: str) -> list[str]:
    """What is wrong with each call block left in a reply's text."""
    problems = []
    for match in BLOCK.finditer(text):
        if not match.group(0).endswith("</tool_call>"):
            problems.append("the tool call was not closed with </tool_call>")
            continue
        try:
            value = json.loads(match.group(1))
        except json.JSONDecodeError as err:
            problems.append(f"the tool call is not valid JSON ({err.msg.removesuffix(' at')} at character {err.pos})")
            continue
        except RecursionError:
            problems.append("the tool call nests its JSON too deeply")
            continue
        except ValueError as err:
            problems.append(f"the tool call holds JSON that cannot be read ({str(err).split(';')[0]})")
            continue
        for item in value if isinstance(value, list) and value else [value]:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
                problems.append('the tool call has no "name" string')
            else:  # named, but its arguments are not an object
                problems += arguments_problem(item.get("arguments", item.get("parameters", {})))
    return problems


def arguments_problem(arguments) -> list[str]:
    """What is wrong with a named call's arguments (none, if they are an object). The engine's own
    loop answers such a call with a tool message to a call it adds with {} arguments; a server
    returns no such call, so here it is a user message, like any other malformed call."""
    if isinstance(arguments, str) and arguments.strip():
        try:
            arguments = json.loads(arguments)
        except ValueError as err:
            return ['"arguments" is a string that is not a JSON object: it is not valid JSON '
                    f"({getattr(err, 'msg', str(err)).removesuffix(' at')} at character {getattr(err, 'pos', 0)})"]
    elif isinstance(arguments, str):
        arguments = {}
    return [] if isinstance(arguments, dict) else [f'"arguments" must be an object, got {type(arguments).__name__}']


async def rollout(client, model, example):
    prompt = example["prompt"]
    messages = [{"role": "system", "content": SYSTEM}] + (
        list(prompt) if isinstance(prompt, list) else [{"role": "user", "content": str(prompt)}])
    for _ in range(MAX_TURNS):
        response = await client.chat.completions.create(model=model, messages=messages, tools=TOOLS)
        reply = response.choices[0].message
        calls = reply.tool_calls or []
        unparsed = unparsed_calls(reply.content or "")
        messages.append(reply.model_dump(exclude_none=True, include={"role", "content", "tool_calls"}))
        for call in calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "name": call.function.name,
                             "content": run_tool(call.function.name, call.function.arguments)})
        messages += [{"role": "user", "content": f"error: {problem}; {FORMAT_HINT}"} for problem in unparsed]
        if not calls and not unparsed:
            break  # an answer: the episode is over
    return messages
