"""The child process that runs a user's ``rollout.py``: many rollouts at once, on asyncio.

Run as ``python -P -m rlab.engine.agent.worker`` by
``engine.agent.process.AgentProcess`` through the reward child's machinery
(``engine.rewards.child.UserCodeProcess``: memory cap, scratch directory, own
process group, what it prints scrubbed and bounded on the way to the log).
One JSON request per line on stdin, one answer per line on a private copy of
stdout, each echoing the request's ``id``:

- ``{"kind": "load", "source", "filename"}``: check the file defines
  ``async def rollout(client, model, example)``. Answer ``{}`` or
  ``{"failure": message}``.
- ``{"kind": "rollouts", "source", "filename", "model", "api_key",
  "timeout_s", "rollouts": [{"key", "base_url", "example"}]}``: run every
  rollout concurrently, each with its own ``openai.AsyncOpenAI`` client (its
  base URL names the rollout; no retries: a refused request is the rollout's
  to handle; one connection pool for all) under ``timeout_s``. Answer ``{"results": [{"key", "messages",
  "reward", "metrics", "error"}]}``: ``messages`` the conversation as plain
  JSON dicts, ``reward`` a float or None, ``metrics`` {name: float},
  ``error`` None or ``{"kind", "message"}`` (kinds in :data:`ERROR_KINDS`).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from rlab.engine.rewards.reply_pipe import serve
from rlab.engine.rewards.rubric_errors import RubricError, line_of, where
from rlab.engine.rewards.user_source import run_source

#: What can go wrong in a rollout, as its error's ``kind``.
ERROR_KINDS = ("raised", "timeout", "bad_return")


def load_rollout(source: str, filename: str) -> Any:
    """The file's ``rollout`` coroutine function.

    Raises:
        RubricError: the file does not load, or defines no ``async def rollout``
            taking (client, model, example).
    """
    folder = str(Path(filename).resolve().parent)
    if folder not in sys.path:
        sys.path.append(folder)  # its own helper modules; appended, so they never shadow a package
    module = run_source(source, filename, "_agent")
    rollout = getattr(module, "rollout", None)
    name = Path(filename).name
    if rollout is None or not inspect.iscoroutinefunction(rollout):
        raise RubricError(f"{name} defines no `async def rollout(client, model, example)`; "
                          "define one (it may call your own agent code)", kind="exception")
    try:
        inspect.signature(rollout).bind(None, "model", {})
    except TypeError:
        raise RubricError(f"{name}: rollout{inspect.signature(rollout)} cannot take (client, model, example); "
                          "give it those three parameters", kind="exception") from None
    return rollout


def plain_messages(value: Any) -> list[dict[str, Any]]:
    """A returned conversation as JSON dicts: pydantic messages (the openai package's) dumped,
    ART's ``Choice`` entries as their message.

    Raises:
        TypeError: not a list, or an entry that is not a message with a role.
    """
    if not isinstance(value, list):
        raise TypeError(f"the conversation must be a list of messages, got {type(value).__name__}")
    out = []
    for i, item in enumerate(value):
        if hasattr(item, "message") and hasattr(item, "finish_reason"):
            item = item.message  # an openai Choice, as ART keeps sampled turns
        if hasattr(item, "model_dump"):
            item = item.model_dump(exclude_none=True, mode="json")
        if not isinstance(item, dict) or not isinstance(item.get("role"), str):
            raise TypeError(f"message {i} is not a chat message with a role: {str(item)[:80]!r}")
        out.append(json.loads(json.dumps(item, default=str)))
    return out


def _result(value: Any) -> dict[str, Any]:
    """``{"messages", "reward", "metrics"}`` of what a rollout returned (TypeError: not one)."""
    if isinstance(value, dict):
        if "messages" not in value:
            raise TypeError("a returned dict needs a 'messages' key (the conversation)")
        reward, metrics = value.get("reward"), value.get("metrics") or {}
        if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))
                                   or not math.isfinite(reward)):
            raise TypeError(f"'reward' must be a finite number or None, got {reward!r}")
        if not isinstance(metrics, dict) or not all(
                isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) for k, v in metrics.items()):
            raise TypeError("'metrics' must map names to numbers")
        return {"messages": plain_messages(value["messages"]), "reward": None if reward is None else float(reward),
                "metrics": {k: float(v) for k, v in metrics.items()}}
    return {"messages": plain_messages(value), "reward": None, "metrics": {}}


async def _one(rollout: Any, request: dict[str, Any], item: dict[str, Any], http: Any) -> dict[str, Any]:
    from openai import AsyncOpenAI

    out: dict[str, Any] = {"key": item["key"], "messages": None, "reward": None, "metrics": {}, "error": None}
    client = AsyncOpenAI(base_url=item["base_url"], api_key=request["api_key"], max_retries=0,
                         timeout=request["timeout_s"], http_client=http)
    try:
        value = await asyncio.wait_for(rollout(client, request["model"], item["example"]), request["timeout_s"])
    except asyncio.TimeoutError:
        out["error"] = {"kind": "timeout", "message": f"the rollout did not return within {request['timeout_s']:g} s"}
        return out
    except Exception as exc:
        line = line_of(exc.__traceback__, request["filename"])
        out["error"] = {"kind": "raised", "message": f"{type(exc).__name__}: {exc}"[:500]
                        + where(request["filename"], line)}
        traceback.print_exc()  # to the engine's log, scrubbed on the way
        return out
    try:
        out.update(_result(value))
    except (TypeError, ValueError) as exc:
        out["error"] = {"kind": "bad_return", "message": f"rollout returned {type(value).__name__}: {exc}"}
    return out


_LOADED: dict[tuple[str, str], Any] = {}


def answer(request: dict[str, Any]) -> dict[str, Any]:
    """The answer to one request (see the module doc); the file is loaded once per text."""
    key = (request["source"], request["filename"])
    try:
        rollout = _LOADED[key] if key in _LOADED else _LOADED.setdefault(key, load_rollout(*key))
    except RubricError as exc:
        return {"id": request["id"], "failure": str(exc)}
    if request["kind"] == "load":
        return {"id": request["id"]}

    async def run_all() -> list[dict[str, Any]]:
        from openai import DefaultAsyncHttpxClient

        # one connection pool for every rollout's client: a client of its own costs 20 ms (its TLS context)
        async with DefaultAsyncHttpxClient(timeout=request["timeout_s"]) as http:
            return list(await asyncio.gather(*(_one(rollout, request, item, http) for item in request["rollouts"])))

    return {"id": request["id"], "results": asyncio.run(run_all())}


#: Agent frameworks' calls home, off (set unless the user set them): litellm's price list
#: fetch on ART's import, python-dotenv loading a stray .env, the Agents SDK's trace export
#: (which would post with the user's OPENAI_API_KEY).
OFFLINE_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PYTHON_DOTENV_DISABLED": "1",
               "OPENAI_AGENTS_DISABLE_TRACING": "1"}


def main() -> None:
    """Serve requests until stdin closes."""
    for name, value in OFFLINE_ENV.items():
        os.environ.setdefault(name, value)
    serve(answer)


if __name__ == "__main__":
    main()
