"""Reward-function signatures: detect the three styles users already have, adapt them to the lab's.

The rubric (``engine.rewards.rubric``) calls every reward function as
``f(example, completion)`` once per trajectory. Users bring functions
written for three conventions, told apart by their parameter names:

- ``lab``: the lab's scorer contract ``f(example, completion) -> float |
  {"reward", "details"}`` (docs/interfaces.md). Any function whose first
  parameter is ``example``, or any other two-argument function, is taken
  as-is: it is not wrapped.
- ``trl``: TRL's batched form ``f(completions, **kwargs) -> list[float |
  None]`` (TRL ``GRPOTrainer``, "Using a custom reward function"): kwargs
  are ``prompts``, ``completion_ids`` (when the engine knows them) and every
  dataset column, each a list with one entry per completion. Conversational
  prompts (a list of messages) give conversational completions
  (``[{"role": "assistant", "content": text}]``). ``None`` means "does not
  apply": the component is left out of the weighted sum (it adds 0, as TRL's
  ``nansum`` does) and its details say ``applies: False``.
- ``verifiers``: the named-argument style of the ``verifiers`` library's
  rubrics, ``f(completion, answer, prompt, info, state, task, parser,
  **kwargs) -> float``: any subset of those names; with ``**kwargs`` every
  dataset column is passed too. ``async def`` is allowed (as in every style).

A TRL function is called with lists of length one, once per trajectory, so
it runs under the rubric's per-call time limit and its errors are reported
for the one example they happened on.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any, Literal

from rlab.engine.rewards.helpers import ENV_REWARDS_KEY, TOOL_CALLS_KEY

Style = Literal["lab", "trl", "verifiers"]

#: Parameter names of the verifiers style (verifiers ``Rubric`` reward functions).
VERIFIERS_NAMES = frozenset({"completion", "answer", "prompt", "info", "state", "task", "parser"})

#: Example keys the engine adds for scoring only; never passed on as dataset columns.
COMPLETION_IDS_KEY = "_completion_ids"
ENGINE_KEYS = frozenset({COMPLETION_IDS_KEY, ENV_REWARDS_KEY, TOOL_CALLS_KEY})

#: How each style is named in logs and in the reward editor.
STYLE_LABELS: dict[str, str] = {
    "lab": "lab f(example, completion)",
    "trl": "TRL f(completions, **kwargs)",
    "verifiers": "verifiers f(completion, answer, ...)",
}


#: Short names of the styles (the reward editor's weight labels).
STYLE_TAGS: dict[str, str] = {"lab": "lab", "trl": "TRL", "verifiers": "verifiers"}


class TrlLengthError(ValueError):
    """A TRL-style reward function returned the wrong number of rewards."""


def _parameters(fn: Callable[..., Any]) -> list[inspect.Parameter] | None:
    try:
        return list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # builtins without a signature
        return None


def detect_style(fn: Callable[..., Any]) -> Style | None:
    """The style of reward function ``fn``, from its parameter names.

    Returns:
        ``"trl"`` when a parameter is named ``completions``; ``"lab"`` when
        the first parameter is ``example`` or the function can be called
        with two positional arguments and names no verifiers parameter;
        ``"verifiers"`` when every named parameter is one of
        :data:`VERIFIERS_NAMES` (``**kwargs`` allowed); else None (no
        style fits). A callable without a signature is taken as ``"lab"``.
    """
    params = _parameters(fn)
    if params is None:
        return "lab"
    return _style([(p.name, p.kind, p.default is not p.empty) for p in params])


def _style(params: list[tuple[str, Any, bool]]) -> Style | None:
    """:func:`detect_style` on (name, inspect kind, has default) triples."""
    P = inspect.Parameter
    names = [n for n, kind, _ in params if kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD)]
    if "completions" in names:
        return "trl"
    if names[:1] == ["example"]:
        return "lab"
    if names and set(names) <= VERIFIERS_NAMES:
        return "verifiers"
    positional = [(n, d) for n, kind, d in params if kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    required = [n for n, kind, d in params if not d and kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD)]
    star = any(kind == P.VAR_POSITIONAL for _, kind, _ in params)
    two_fit = len(required) <= 2 and (len(positional) >= 2 or star) and all(
        n in [m for m, _ in positional[:2]] for n in required)
    return "lab" if two_fit else None


def styles_in_source(source: str) -> dict[str, Style]:
    """name -> style of each public module-level function of a reward file, read without running it
    (for the reward editor). Files that do not parse give {}."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    P = inspect.Parameter
    found: dict[str, Style] = {}
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name.startswith("_"):
            continue
        a = node.args
        positional = a.posonlyargs + a.args
        n_default = len(a.defaults)
        params: list[tuple[str, inspect._ParameterKind, bool]] = [(arg.arg, P.POSITIONAL_OR_KEYWORD, i >= len(positional) - n_default)
                  for i, arg in enumerate(positional)]
        params += [(arg.arg, P.VAR_POSITIONAL, False) for arg in [a.vararg] if arg]
        params += [(arg.arg, P.KEYWORD_ONLY, d is not None) for arg, d in zip(a.kwonlyargs, a.kw_defaults)]
        params += [(arg.arg, P.VAR_KEYWORD, False) for arg in [a.kwarg] if arg]
        style = _style(params)
        if style is not None:
            found[node.name] = style
    return found


def is_reward_candidate(fn: Any, module_name: str) -> bool:
    """Whether ``fn`` is a public function defined in the reward file itself
    (not imported) whose signature is one of the three styles."""
    return (inspect.isfunction(fn) and fn.__module__ == module_name
            and not fn.__name__.startswith("_") and detect_style(fn) is not None)


def style_of(fn: Callable[..., Any]) -> Style | None:
    """The detected style of a (possibly adapted) rubric function."""
    return detect_style(inspect.unwrap(fn))


def adapt(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as a lab-contract function ``f(example, completion)``.

    Lab-style functions come back unchanged; the others are wrapped (sync
    stays sync, async stays async; ``__wrapped__`` points at ``fn``).

    Raises:
        ValueError: no style fits ``fn``'s parameters (see :func:`detect_style`).
    """
    style = detect_style(fn)
    if style is None:
        raise ValueError(f"{getattr(fn, '__name__', fn)!r} has no reward-function signature")
    if style == "lab":
        return fn
    build = _trl_call if style == "trl" else _verifiers_call
    finish = _trl_result if style == "trl" else _same
    params = _parameters(fn) or []
    accepts_all = any(p.kind == p.VAR_KEYWORD for p in params)
    accepted = {p.name for p in params}
    # a parser bound beforehand (functools.partial) is not overridden by the lab's None
    bound = {p.name for p in params if p.name == "parser" and p.default is not p.empty}

    def arguments(example: Mapping[str, Any], completion: Any) -> dict[str, Any]:
        kwargs = {k: v for k, v in build(example, completion).items() if k not in bound}
        return kwargs if accepts_all else {k: v for k, v in kwargs.items() if k in accepted}

    if inspect.iscoroutinefunction(fn):
        @functools.wraps(fn)
        async def adapted_async(example, completion):
            return finish(await fn(**arguments(example, completion)))

        return adapted_async

    @functools.wraps(fn)
    def adapted(example, completion):
        return finish(fn(**arguments(example, completion)))

    return adapted


def _columns(example: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in example.items() if k not in ENGINE_KEYS}


def _conversational(example: Mapping[str, Any], completion: Any) -> Any:
    """A text completion as messages when the prompt is messages (TRL's and verifiers' rule)."""
    if isinstance(example.get("prompt"), list) and isinstance(completion, str):
        return [{"role": "assistant", "content": completion}]
    return completion


def _trl_call(example: Mapping[str, Any], completion: Any) -> dict[str, Any]:
    columns = _columns(example)
    kwargs = {name: [value] for name, value in columns.items()}
    kwargs["prompts"] = [columns.get("prompt")]
    kwargs["completions"] = [_conversational(example, completion)]
    if COMPLETION_IDS_KEY in example:
        kwargs["completion_ids"] = [list(example[COMPLETION_IDS_KEY])]
    if ENV_REWARDS_KEY in example:
        kwargs["env_rewards"] = [list(example[ENV_REWARDS_KEY])]
    if TOOL_CALLS_KEY in example:
        kwargs["tool_calls"] = [list(example[TOOL_CALLS_KEY])]
    return kwargs


def _trl_result(value: Any) -> Any:
    """The one reward of a length-one TRL answer; None -> "does not apply" (adds 0)."""
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise TrlLengthError(f"returned {type(value).__name__} {value!r:.40}; a TRL-style reward function "
                             "returns a list with one float (or None) per completion")
    if len(value) != 1:
        raise TrlLengthError(f"returned {len(value)} rewards for 1 completion; a TRL-style reward function "
                             "returns one float (or None) per completion")
    reward = value[0]
    if reward is None:
        return {"reward": 0.0, "details": {"applies": False}}
    return reward


def _verifiers_call(example: Mapping[str, Any], completion: Any) -> dict[str, Any]:
    columns = _columns(example)
    completion = _conversational(example, completion)
    named = {
        "completion": completion,
        "answer": columns.get("answer", ""),
        "prompt": columns.get("prompt"),
        "info": columns.get("info") or {},
        "task": columns.get("task", "default"),
        "parser": None,  # a verifiers task binds its parser (scenarios.third_party)
        # verifiers' state of a finished single-turn rollout, as far as the lab knows it
        "state": {"prompt": columns.get("prompt"), "completion": completion,
                  "answer": columns.get("answer", ""), "info": columns.get("info") or {},
                  **({"env_rewards": list(example[ENV_REWARDS_KEY])} if ENV_REWARDS_KEY in example else {}),
                  **({"tool_calls": list(example[TOOL_CALLS_KEY])} if TOOL_CALLS_KEY in example else {})},
    }
    return {**{k: v for k, v in columns.items() if k not in named}, **named}


def _same(value: Any) -> Any:
    return value


def log_reward_styles(rubric) -> None:
    """Print the detected style of each reward function of ``rubric`` to stderr (the run's log)."""
    import sys

    shown = ", ".join(f"{name} [{STYLE_LABELS[style_of(fn) or 'lab']}]" for name, fn in rubric.functions.items())
    print(f"rlab: reward functions: {shown}", file=sys.stderr, flush=True)
