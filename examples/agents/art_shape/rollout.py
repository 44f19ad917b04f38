"""An ART rollout function, run unchanged through rlab's endpoint.

``art_rollout`` is written as ART's own examples write one:
- an ``art.Model`` whose ``openai_client()`` asks the model for each turn;
- an ``art.Trajectory`` that keeps the sampled ``Choice`` objects and the tool results;
- the trajectory's own reward.

It uses nothing from rlab. ``rollout`` is the door:
- it points an ``art.Model`` at the endpoint's per-rollout base URL, key and model name;
- it hands back ART's messages, with ART's reward as the rollout's reward.

Needs ``pip install openpipe-art`` (the client side; no GPU backend).
"""

import json
import os
import re

# `import art` imports litellm, which fetches a price list from GitHub at import, and runs
# python-dotenv's load_dotenv(), which reads the first .env above ART's install folder.
# Neither belongs in a training run.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("PYTHON_DOTENV_DISABLED", "1")

import art  # noqa: E402

SYSTEM = "Add the two numbers with the add tool, then reply with the sum only."
TOOLS = [{
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}]
MAX_TURNS = 3


def add(a: int, b: int) -> int:
    return a + b


async def art_rollout(model: art.Model, scenario: dict) -> art.Trajectory:
    """One episode, as an ART user writes it: call the model, run its tool calls, score the answer."""
    client = model.openai_client()
    trajectory = art.Trajectory(
        messages_and_choices=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": scenario["prompt"]}],
        tools=TOOLS,
        reward=0.0,
        metadata={"scenario_id": scenario["id"]},
    )
    trajectory.metrics["tool_errors"] = 0
    for turn in range(1, MAX_TURNS + 1):
        response = await client.chat.completions.create(
            model=model.get_inference_name(),
            messages=trajectory.messages(),
            tools=TOOLS,
            max_completion_tokens=96,
        )
        choice = response.choices[0]
        trajectory.messages_and_choices.append(choice)
        trajectory.metrics["turns"] = turn
        if not choice.message.tool_calls:
            break
        for call in choice.message.tool_calls:
            try:
                if call.function.name != "add":
                    raise ValueError(f"no tool {call.function.name!r}; the tool: add")
                args = json.loads(call.function.arguments)
                result = str(add(int(args["a"]), int(args["b"])))
            except Exception as exc:  # a bad call is the model's mistake, told to it
                result = f"error: {exc}"
                trajectory.metrics["tool_errors"] += 1
            trajectory.messages_and_choices.append({"role": "tool", "tool_call_id": call.id, "content": result})

    answered = not choice.message.tool_calls
    numbers = re.findall(r"-?\d+", choice.message.content or "")
    trajectory.reward = 1.0 if answered and numbers and numbers[-1] == scenario["answer"] else 0.0
    return trajectory


async def rollout(client, model, example):
    """rlab's entry point: an ART model pointed at this rollout's endpoint, its trajectory back as messages."""
    art_model = art.Model(
        name=model,
        project="rlab",
        inference_base_url=str(client.base_url),
        inference_api_key=client.api_key,
        inference_model_name=model,
    )
    # openpipe-art 0.5.18's openai_client() builds its http client from classic httpx.Timeout and
    # httpx.Limits. openai >= 3 sends through httpx2, so that client's first request raises
    # "TypeError: unsupported operand type(s) for +: 'float' and 'Timeout'". ART returns a cached
    # client when it has one, so it gets the endpoint's client instead. For a plain art.Model,
    # ART's wrapper around the client adds nothing: no cost hook, no extra_body.
    art_model._openai_client = client
    trajectory = await art_rollout(art_model, example)
    return {
        "messages": trajectory.messages(),  # ART's own conversion: each Choice becomes an assistant dict
        "reward": trajectory.reward,
        "metrics": {name: float(value) for name, value in trajectory.metrics.items()},
    }
