"""A verifiers MultiTurnEnv (not a ToolEnv), played by verifiers' own rollout loop through rlab's endpoint.

``GuessNumber`` and ``load_environment`` are written as a verifiers 0.2 user writes them:
- ``env_response`` answers each guess, and ``final_env_response`` ends the game;
- a Rubric scores the game.

They use nothing from rlab. ``rollout`` is the door:
- ``env.rollout(input, client, model, sampling_args)`` plays one game. It is MultiTurnEnv's own
  loop, which asks the endpoint for each turn through verifiers' chat-completions client;
- ``env.rubric.score_rollout(state)`` scores it, as ``Environment.run_rollout`` does;
- the conversation comes back as OpenAI messages, with the rubric's reward as the rollout's reward.

Needs ``pip install 'verifiers>=0.2.1,<0.3'``.
"""

import re
import signal
from pathlib import Path

import verifiers as vf
from verifiers.clients import OpenAIChatCompletionsClient
from verifiers.errors import EmptyModelResponseError

HERE = Path(__file__).resolve().parent
SYSTEM = "Guess the secret number. After a wrong guess you are told higher or lower."


class GuessNumber(vf.MultiTurnEnv):
    """Find the secret in 1..n (the row's answer); a wrong guess is answered "higher" or "lower"."""

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs) -> vf.Messages:
        guess = re.search(r"-?\d+", self.parser.parse_answer(messages) or "")
        if guess and guess.group() == state["answer"]:
            reply = [vf.UserMessage(content="correct")]
            state["final_env_response"] = reply  # the game ends after this message
            return reply
        if guess is None:
            return [vf.UserMessage(content="Reply with one number.")]
        return [vf.UserMessage(content="higher" if int(guess.group()) < int(state["answer"]) else "lower")]


def solved(completion, answer, parser, **kwargs) -> float:
    """1.0 when the last guess is the secret."""
    guess = re.search(r"-?\d+", parser.parse_answer(completion) or "")
    return float(bool(guess) and guess.group() == answer)


def load_environment(max_turns: int = 3) -> vf.Environment:
    def dataset():  # built only by verifiers' own eval/train tools; rlab reads the task's data itself
        from datasets import load_dataset

        rows = load_dataset("json", data_files=str(HERE / "train.jsonl"))["train"]
        return rows.map(lambda r: {"prompt": [{"role": "system", "content": SYSTEM},
                                              {"role": "user", "content": r["prompt"]}]})

    return GuessNumber(dataset=dataset, rubric=vf.Rubric(funcs=[solved]), max_turns=max_turns)


_ENV: list[vf.Environment] = []


def _environment() -> vf.Environment:
    """The environment, built once per process.

    verifiers' Environment installs SIGINT/SIGTERM handlers when it is built; the rollout
    process keeps its own.
    """
    if not _ENV:
        kept = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        _ENV.append(load_environment())
        for sig, handler in kept.items():
            signal.signal(sig, handler)
    return _ENV[0]


async def rollout(client, model, example):
    """rlab's entry point: one game through MultiTurnEnv.rollout, scored by the env's rubric."""
    env = _environment()
    vf_client = OpenAIChatCompletionsClient(client)  # verifiers' adapter around the endpoint's AsyncOpenAI
    rollout_input = {
        "prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": example["prompt"]}],
        "answer": example["answer"],
        "example_id": int(example["example_id"]),
    }
    state = await env.rollout(rollout_input, vf_client, model, sampling_args={"max_tokens": 8})
    await env.rubric.score_rollout(state)

    # verifiers' own conversion of its messages to OpenAI chat messages (what it sends), minus null keys
    native, _ = await vf_client.to_native_prompt(list(state["prompt"]) + list(state["completion"] or []))
    messages = [{k: v for k, v in dict(m).items() if v is not None} for m in native]
    error = state.get("error")
    if isinstance(error, EmptyModelResponseError):
        # verifiers stops on an empty answer without keeping the turn; the policy sampled it, so it stays
        messages.append({"role": "assistant", "content": ""})
    elif error is not None:
        # verifiers keeps any other failed request (a refusal, a 401, a bad response) in state["error"];
        # raised, it becomes the engine's own named error trajectory
        cause = f" ({type(error.__cause__).__name__}: {error.__cause__})" if error.__cause__ else ""
        raise RuntimeError(f"verifiers stopped the game on {type(error).__name__}{cause}") from error
    metrics = {name: float(value) for name, value in (state.get("metrics") or {}).items()}
    metrics["empty_answer"] = float(error is not None)
    return {"messages": messages, "reward": float(state["reward"] or 0.0), "metrics": metrics}
