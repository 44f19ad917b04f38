"""An OpenAI Agents SDK agent with one function tool, run unchanged through rlab's endpoint.

``weather_agent`` is written as an Agents SDK user writes one:
- an ``Agent`` with a ``@function_tool``;
- its model an ``OpenAIChatCompletionsModel`` on the given ``AsyncOpenAI`` client;
- run by ``Runner.run``.

It uses nothing from rlab. ``rollout`` is the door: it runs the agent on the endpoint's client.
The SDK's own converter (``Converter.items_to_messages``, what the model sends) turns the run's
items back into chat messages.

Needs ``pip install openai-agents``.
"""

from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunConfig,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from agents.models.chatcmpl_converter import Converter
from agents.run_error_handlers import RunErrorHandlerResult

# The SDK exports traces to OpenAI by default: off, for the whole process.
set_tracing_disabled(True)

INSTRUCTIONS = "Look the temperature up with the tool, then reply with the number only."
MAX_TURNS = 3

# A made-up weather table the model has never seen: only the tool knows it.
TEMPERATURES = {
    "Oslo": 4, "Lima": 19, "Cairo": 27, "Paris": 12, "Quito": 14, "Rome": 16, "Delhi": 31, "Tokyo": 9,
    "Perth": 22, "Dakar": 25, "Kyiv": 2, "Hanoi": 28, "Bern": 7, "Accra": 29, "Riga": 3, "Seoul": 11,
}


@function_tool
def temperature(city: str) -> int:
    """Today's temperature in a city, in degrees Celsius.

    Args:
        city: the city's name, e.g. "Oslo"
    """
    if city not in TEMPERATURES:
        raise ValueError(f"no city {city!r}")
    return TEMPERATURES[city]


def weather_agent(model: OpenAIChatCompletionsModel) -> Agent:
    return Agent(
        name="weather",
        instructions=INSTRUCTIONS,
        tools=[temperature],
        model=model,
        model_settings=ModelSettings(max_tokens=96),
    )


def _out_of_turns(_):
    """Past MAX_TURNS: end the run with no final output, and add no message the model did not write."""
    return RunErrorHandlerResult(final_output=None, include_in_history=False)


async def rollout(client, model, example):
    """rlab's entry point: the agent on the endpoint's client, its run back as chat messages."""
    agent = weather_agent(OpenAIChatCompletionsModel(model=model, openai_client=client))
    result = await Runner.run(
        agent,
        example["prompt"],
        max_turns=MAX_TURNS,
        # no trace export; a call to a tool the agent lacks is an error told to the model, not an abort
        run_config=RunConfig(tracing_disabled=True, tool_not_found_behavior="return_error_to_model"),
        error_handlers={"max_turns": _out_of_turns},
    )
    # the system message is the agent's instructions, which the model puts first in every request
    messages = [{"role": "system", "content": INSTRUCTIONS}, *Converter.items_to_messages(result.to_input_list())]
    if result.raw_responses and not result.raw_responses[-1].output:
        # an empty answer leaves no item in the run; the policy sampled it, so it stays
        messages.append({"role": "assistant", "content": ""})
    calls = sum(len(m.get("tool_calls") or []) for m in messages)
    return {"messages": messages, "metrics": {"tool_calls": float(calls), "answered": float(bool(result.final_output))}}
