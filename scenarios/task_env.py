"""Multi-step user environments (``env = "env.py:ClassName"`` in task.toml).

A user environment is a small text environment in the spirit of gymnasium
(protocol in docs/tasks.md)::

    class MyEnv:
        def reset(self, example: dict, seed: int) -> str | list[dict]      # first observation
        def step(self, text: str) -> tuple[obs, float, bool, dict]         # observation, reward, done, info
        def state_key(self) -> Hashable                                    # GiGPO's anchor state

``reset`` may also return gymnasium's ``(observation, info)`` and ``step``
gymnasium's five-tuple ``(observation, reward, terminated, truncated,
info)``. An observation is a string (one user message) or a list of chat
messages. ``info["invalid"] = True`` marks an action the environment could
not apply. :class:`UserEnv` adapts such a class to the engine's protocol
(``engine.types.Environment``), so user environments run through the
same multi-turn engine, GiGPO and advantages view as number_guess.

The file is loaded by path under a private module name; its folder is never
put on ``sys.path``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from rlab.scenarios.task_scenario import TaskError, state_key_of


def load_module(path: Path, role: str):
    """Execute the Python file ``path`` as a fresh module with a private, unique name.

    Raises:
        TaskError: the file does not exist or raises while loading.
    """
    if not path.is_file():
        raise TaskError(f"{role}: no such file {path}")
    name = f"_rlab_user_{path.stem}_{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TaskError(f"{role}: {path} is not a Python file that can be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 - any error in user code is reported, not raised raw
        sys.modules.pop(name, None)
        raise TaskError(f"{role}: {path.name} raised {type(err).__name__} while loading: {err}") from None
    return module


def load_env_factory(base: Path, ref: str, where: str) -> Callable[[dict[str, Any]], UserEnv]:
    """``example -> UserEnv`` for ``ref = "env.py:ClassName"`` (file relative to ``base``);
    the engine opens every episode with the task's ``system_prompt``, as for
    the built-in scenarios.

    Raises:
        TaskError: a malformed ``ref``, a missing file or class, or a class
            without ``reset``/``step``/``state_key``.
    """
    file_part, _, class_name = ref.rpartition(":")
    if not file_part or not class_name:
        raise TaskError(f"{where}: env = {ref!r}: write it as \"env.py:ClassName\"")
    module = load_module((base / file_part).resolve(), f"{where}: env")
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        found = [n for n, v in vars(module).items() if isinstance(v, type) and v.__module__ == module.__name__]
        raise TaskError(f"{where}: env = {ref!r}: {file_part} defines no class {class_name!r}; "
                        f"classes there: {', '.join(found) or '(none)'}")
    missing = [m for m in ("reset", "step", "state_key") if not callable(getattr(cls, m, None))]
    if missing:
        raise TaskError(f"{where}: env class {class_name} lacks {', '.join(missing)}; see docs/tasks.md "
                        "for the protocol (reset(example, seed), step(text), state_key())")
    return lambda example: UserEnv(cls())


def example_seed(example: dict[str, Any]) -> int:
    """The seed of an example's episodes: every episode of a group starts from the same state."""
    return int.from_bytes(hashlib.sha256(repr(example.get("id")).encode()).digest()[:4], "big")


def _messages(observation: Any) -> list[dict[str, Any]]:
    if isinstance(observation, str):
        return [{"role": "user", "content": observation}]
    return list(observation)


class UserEnv:
    """A user environment behind the engine's ``Env`` protocol.

    ``invalid`` follows ``info["invalid"]`` of the last step.
    """

    def __init__(self, env: Any):
        self.env = env
        self.invalid = False

    def reset(self, example: dict[str, Any]) -> tuple[list[dict[str, Any]], Hashable]:
        """Reset from ``example`` with its seed (:func:`example_seed`)."""
        observation = self.env.reset(example, example_seed(example))
        if isinstance(observation, tuple) and len(observation) == 2 and isinstance(observation[1], dict):
            observation = observation[0]  # gymnasium's (observation, info)
        self.invalid = False
        return _messages(observation), state_key_of(self.env.state_key())

    def step(self, action: str) -> tuple[list[dict[str, Any]], float, bool, Hashable]:
        """One assistant turn: (observation messages, reward, done, state key)."""
        result = self.env.step(action)
        if len(result) == 5:  # gymnasium's (observation, reward, terminated, truncated, info)
            observation, reward, terminated, truncated, info = result
            done = bool(terminated or truncated)
        else:
            observation, reward, done, info = result
        self.invalid = bool((info or {}).get("invalid", False))
        return _messages(observation), float(reward), bool(done), state_key_of(self.env.state_key())
