"""Rubrics: a reward file loaded as weighted reward functions, scored safely.

A rubric file is plain Python (docs/interfaces.md): reward functions that
follow the scorer contract ``score(example, completion) -> {"reward": float,
"details": dict}`` (a bare number is accepted; sync or ``async def``;
multi-step scenarios may add ``"step_rewards"``: a list with one reward per
turn, or a dict ``{turn_index: reward}`` naming only the turns that earn
one) and a module-level
``WEIGHTS = {"fn_name": weight}``. The total reward of a trajectory is the
weighted sum of its components; every component is kept.

Scoring never kills the run: a function that raises, returns something that
is not a finite number, or runs past the time limit gives that trajectory
reward 0 with the error in its details (see :meth:`Rubric.score_group`).
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import json
import linecache
import math
import numbers
import queue
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from rlab.engine.rewards import signatures

#: Per-call time limit of a reward function, in seconds: in training and in
#: the editor's check alike, so an edit that passes the check is not cut short
#: in training.
DEFAULT_TIMEOUT_S = 10.0

#: The largest reward magnitude a function (or a weighted total) may give. A
#: finite reward of 1e308 passes isfinite(), then its group's mean and std
#: overflow to inf and the update turns the weights into NaN; 1e6 is far
#: above any real reward scale and far below float64's overflow.
MAX_ABS_REWARD = 1e6


class RubricError(ValueError):
    """A reward file that cannot be used as a rubric.

    Attributes:
        kind: ``"syntax"`` (does not compile), ``"import"`` (an import in the
            file failed), ``"exception"`` (the module raised while loading),
            ``"weights"`` (no reward function, or WEIGHTS wrong) or
            ``"signature"`` (a function fits none of the signatures of
            ``engine.rewards.signatures``).
        lineno: 1-based line in the reward file the problem is on, or None.
    """

    def __init__(self, message: str, *, kind: str, lineno: int | None = None):
        super().__init__(message)
        self.kind = kind
        self.lineno = lineno


@dataclass
class ScoreResult:
    """The rubric's verdict on one trajectory.

    Attributes:
        reward: weighted total ``sum_f WEIGHTS[f] * components[f]`` (float);
            0.0 when any function errored.
        components: unweighted reward of each rubric function, by name
            (0.0 for a function that errored).
        details: each function's details dict under its name, plus a
            top-level ``parse_status`` taken from the first function (in
            WEIGHTS order) that reports one, and ``error`` when there is one.
        step_rewards: per-turn rewards, the weighted sum over the functions
            that return ``step_rewards`` (None when none does): a list (one
            per turn) when every such function returned a list, else a dict
            ``{turn_index: reward}`` (turns not named earn 0). The engine
            puts the rest of ``reward`` on the last turn
            (``engine.rewards.turns``).
        error: ``"fn_name: ExcType: message (rewards.py line N)"`` for the
            first function that failed, else None. On an error ``details``
            also holds ``error``, ``error_kind`` (``"exception"``,
            ``"bad_reward"`` or ``"timeout"``) and ``error_line`` (int or None).
    """

    reward: float
    components: dict[str, float]
    details: dict[str, Any]
    step_rewards: StepRewards | None = None
    error: str | None = None


#: Per-turn rewards of one function or one trajectory: one float per turn, or
#: ``{turn_index: reward}`` for the turns that earn one.
StepRewards = list[float] | dict[int, float]


@dataclass
class _Outcome:
    """One function's normalised answer on one trajectory (internal)."""

    reward: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)
    step_rewards: StepRewards | None = None
    error: str | None = None
    kind: str | None = None  # "exception", "bad_reward" or "timeout"
    line: int | None = None


def _line_of(tb: types.TracebackType | None, filename: str) -> int | None:
    """Line of the innermost traceback frame that runs in ``filename``."""
    line = None
    for frame, lineno in traceback.walk_tb(tb):
        if frame.f_code.co_filename == filename:
            line = lineno
    return line


def _syntax_error(exc: SyntaxError, display: str) -> RubricError:
    """RubricError for a SyntaxError: the line, the message, the text and a caret."""
    message = f"SyntaxError in {display} line {exc.lineno}: {exc.msg}"
    text = (exc.text or "").rstrip("\n")
    if text.strip():
        indent = len(text) - len(text.lstrip())
        caret = " " * max(0, (exc.offset or 1) - 1 - indent) + "^"
        message += f"\n    {text.strip()}\n    {caret}"
    return RubricError(message, kind="syntax", lineno=exc.lineno)


def _weights_node(source: str) -> ast.Assign | ast.AnnAssign | None:
    """The last module-level ``WEIGHTS = ...`` assignment (the one in force), if any."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    found = None
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "WEIGHTS" for t in targets):
            found = node
    return found


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
    except SyntaxError:
        return False
    return True


def _weights_line(source: str) -> int | None:
    """Line of the module-level ``WEIGHTS = ...`` assignment, if any."""
    node = _weights_node(source)
    return node.lineno if node is not None else None


def literal_weights(source: str) -> dict[str, float] | None:
    """Read ``WEIGHTS`` from a reward file's text without running it.

    Returns:
        name -> weight when WEIGHTS is a literal dict of numbers (e.g. for a
        weights editor), else None (missing, computed, or the file does not
        parse). Use :func:`load_rubric` to validate.
    """
    node = _weights_node(source)
    try:
        value = ast.literal_eval(node.value) if node is not None and node.value is not None else None
    except ValueError:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) for k, v in value.items()
    ):
        return None
    return {k: float(v) for k, v in value.items()}


def replace_weights(source: str, weights: Mapping[str, float]) -> str:
    """Rewrite the reward file's ``WEIGHTS`` assignment with new weights.

    Live weight changes go through the file, so the stored source (and its
    sha256) always says which weights scored a trajectory. Only the value of
    the last module-level ``WEIGHTS = ...`` changes; the rest of the text is
    kept byte for byte.

    Args:
        source: the reward file's text.
        weights: name -> weight (finite numbers), written in this order.

    Raises:
        RubricError: the source does not parse (``kind="weights"``); a
            weight is not a finite number. A file without WEIGHTS gets one
            appended.
    """
    for name, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, numbers.Real) or not math.isfinite(weight):
            raise RubricError(f"weight for {name!r} is {weight!r}; a weight must be a finite number", kind="weights")
    node = _weights_node(source)
    literal = "{" + ", ".join(f"{json.dumps(name)}: {float(w)!r}" for name, w in weights.items()) + "}"
    if node is None:
        if _parses(source):  # WEIGHTS is optional: the first weight edit adds it
            return source + ("" if source.endswith("\n") or not source else "\n") + f"\nWEIGHTS = {literal}\n"
        raise RubricError("the reward file does not parse; fix the file first", kind="weights")
    value = node.value
    # _weights_node only returns assignments with a value, and ast.parse fills every position
    assert value is not None and value.end_lineno is not None and value.end_col_offset is not None
    lines = source.splitlines(keepends=True)
    # ast offsets are in utf-8 bytes; slice bytes so non-ASCII text before them is safe
    start = sum(len(x.encode()) for x in lines[: value.lineno - 1]) + value.col_offset
    end = sum(len(x.encode()) for x in lines[: value.end_lineno - 1]) + value.end_col_offset
    data = source.encode()
    return (data[:start] + literal.encode() + data[end:]).decode()


def _check_weights(raw: Any, namespace: dict[str, Any], source: str, display: str,
                   module_name: str = "") -> dict[str, float]:
    """Validate ``WEIGHTS`` against the module namespace; return name -> float.

    The reward functions are those WEIGHTS names plus every public function
    the file defines with a reward-function signature; the ones WEIGHTS
    does not name weigh 1.0 (WEIGHTS itself is optional). No discovery
    without ``module_name`` (re-weighting a loaded rubric).
    """
    line = _weights_line(source)
    where = f"{display} line {line}" if line else display
    found = {n: 1.0 for n, fn in namespace.items() if signatures.is_reward_candidate(fn, module_name)}
    if raw is None:
        if found:
            return found
        raise RubricError(
            f"{display} defines no reward functions and no WEIGHTS; define e.g. "
            "`def correct(example, completion)` (or a TRL or verifiers-style function), and "
            'optionally a module-level WEIGHTS = {"correct": 1.0}',
            kind="weights",
        )
    if not isinstance(raw, Mapping) or not raw:
        raise RubricError(
            f"WEIGHTS in {where} must be a non-empty dict of function name -> weight, "
            f"got {type(raw).__name__} {raw!r:.60}",
            kind="weights",
            lineno=line,
        )
    weights: dict[str, float] = {}
    for name, weight in raw.items():
        if not callable(namespace.get(name)):
            problem = "is not defined" if name not in namespace else f"is a {type(namespace[name]).__name__}"
            raise RubricError(
                f"WEIGHTS in {where} names {name!r}, which {problem}; define a reward "
                f"function `def {name}(example, completion)` or remove it from WEIGHTS",
                kind="weights",
                lineno=line,
            )
        if isinstance(weight, bool) or not isinstance(weight, numbers.Real) or not math.isfinite(weight):
            raise RubricError(
                f"WEIGHTS[{name!r}] in {where} is {weight!r}; a weight must be a finite number",
                kind="weights",
                lineno=line,
            )
        weights[name] = float(weight)
    return weights | {n: w for n, w in found.items() if n not in weights}


def _adapted(name: str, fn: Callable[..., Any], display: str) -> Callable[..., Any]:
    """``fn`` adapted to ``fn(example, completion)`` (engine.rewards.signatures)."""
    try:
        return signatures.adapt(fn)
    except ValueError:
        line = getattr(getattr(fn, "__code__", None), "co_firstlineno", None)
        raise RubricError(
            f"reward function {name} in {display} line {line} has no reward-function signature; "
            f"write {name}(example, completion) (the lab's), {name}(completions, **kwargs) (TRL's) "
            f"or {name}(completion, answer, ...) (verifiers')",
            kind="signature",
            lineno=line,
        ) from None


def load_rubric(path_or_source: str | Path, *, filename: str = "rewards.py") -> Rubric:
    """Load a reward file into a :class:`Rubric`.

    The source is executed as a fresh module (never cached in
    ``sys.modules``) whose code is compiled under the file's name, so
    tracebacks and error messages carry the file name and line numbers.

    Args:
        path_or_source: a :class:`pathlib.Path` (or other ``os.PathLike``) to
            read, or the source text itself as a ``str``.
        filename: name used in messages when source text is given.

    Returns:
        The rubric, with its functions in ``WEIGHTS`` order.

    Raises:
        RubricError: the file does not compile (``kind="syntax"``), an import
            fails (``"import"``), it raises while loading (``"exception"``),
            WEIGHTS is missing, not a dict, names something that is not a
            callable, or holds a non-numeric or non-finite weight
            (``"weights"``), or a function fits none of the signatures of
            ``engine.rewards.signatures`` (``"signature"``). The message names the line and the fix.
        ValueError: a ``str`` that looks like a file path (pass a Path).
        OSError: a path that cannot be read.
    """
    if isinstance(path_or_source, str):
        if "\n" not in path_or_source and path_or_source.strip().endswith(".py"):
            raise ValueError(
                f"load_rubric got the str {path_or_source!r}, which looks like a file path; "
                "pass pathlib.Path(...) to load a file (a str is taken as the source text)"
            )
        source, code_name = path_or_source, filename
    else:
        path = Path(path_or_source)
        source, code_name = path.read_text(encoding="utf-8"), str(path)
    display = Path(code_name).name
    # Register the text so tracebacks show the lines of *this* version even
    # when the file on disk has changed since.
    linecache.cache[code_name] = (len(source), None, source.splitlines(True), code_name)
    try:
        code = compile(source, code_name, "exec", dont_inherit=True)
    except SyntaxError as exc:
        raise _syntax_error(exc, display) from None
    # A unique module name, registered only while the body runs: dataclasses
    # and typing look the module up there, and versions must not collide.
    name = f"_rubric_{Path(display).stem}_{hashlib.sha256(source.encode()).hexdigest()[:12]}"
    module = types.ModuleType(name)
    module.__file__ = code_name
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)
    except ImportError as exc:
        line = _line_of(exc.__traceback__, code_name)
        raise RubricError(
            f"ImportError in {display} line {line}: {exc}", kind="import", lineno=line
        ) from None
    except (Exception, SystemExit) as exc:  # sys.exit() in a reward file must not end the run
        line = _line_of(exc.__traceback__, code_name)
        raise RubricError(
            f"{type(exc).__name__} in {display} line {line} while loading: {exc}",
            kind="exception",
            lineno=line,
        ) from None
    finally:
        sys.modules.pop(name, None)
    namespace = module.__dict__
    weights = _check_weights(namespace.get("WEIGHTS"), namespace, source, display, name)
    functions = {fn_name: _adapted(fn_name, namespace[fn_name], display) for fn_name in weights}
    return Rubric(source=source, weights=weights, functions=functions, filename=code_name)


class Rubric:
    """Weighted reward functions of one reward-file version.

    Attributes:
        source: the reward file's text.
        sha256: hex sha256 of ``source`` (utf-8).
        weights: function name -> weight (float), in WEIGHTS order.
        functions: function name -> the callable.
        filename: the name the code was compiled under (tracebacks use it).
    """

    def __init__(
        self,
        *,
        source: str,
        weights: dict[str, float],
        functions: dict[str, Callable[..., Any]],
        filename: str,
        hung: dict[str, int | None] | None = None,
    ):
        self.source = source
        self.sha256 = hashlib.sha256(source.encode("utf-8")).hexdigest()
        self.weights = dict(weights)
        self.functions = dict(functions)
        self.filename = filename
        self._display = Path(filename).name
        # Functions that hung once -> the line they hung on; shared with
        # with_weights() copies since their abandoned threads are still stuck.
        self._hung: dict[str, int | None] = hung if hung is not None else {}
        self._async = {n: inspect.iscoroutinefunction(f) for n, f in self.functions.items()}

    def with_weights(self, new_weights: Mapping[str, float]) -> Rubric:
        """A copy of this rubric with other weights (live weight changes).

        Args:
            new_weights: name -> weight for the same function names, each a
                finite number.

        Raises:
            RubricError: a name is not a function of this rubric, one is
                missing, or a weight is not a finite number.
        """
        unknown = set(new_weights) - set(self.functions)
        missing = set(self.functions) - set(new_weights)
        if unknown or missing:
            raise RubricError(
                f"new weights must name exactly the rubric's functions {sorted(self.functions)}; "
                f"unknown {sorted(unknown)}, missing {sorted(missing)}",
                kind="weights",
            )
        weights = _check_weights(dict(new_weights), self.functions, self.source, self._display)
        return Rubric(
            source=self.source,
            weights={n: weights[n] for n in self.functions},
            functions=self.functions,
            filename=self.filename,
            hung=self._hung,
        )

    @property
    def hung(self) -> frozenset[str]:
        """Names of functions that timed out and are now scored as errors."""
        return frozenset(self._hung)

    def score_group(
        self,
        examples: Sequence[Mapping[str, Any]],
        completions: Sequence[Any],
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> list[ScoreResult]:
        """Score trajectories: every rubric function on every (example, completion).

        Sync functions run one after another on a worker thread; async ones
        run on an asyncio loop in that thread, gathered over the group. Each
        call has a time limit of ``timeout_s`` seconds (async calls are
        cancelled at it). A thread cannot be killed: a sync call (or a
        blocking async one) that runs past the limit leaves its thread
        abandoned, and the function is marked hung, so for the rest of this
        rubric version it is scored as an error at once and the run goes on.
        Code that holds the GIL while it hangs (e.g. a runaway regex in C)
        stalls the caller until it returns; only a process limit (see
        ``engine.rewards.edit.check``) stops that.

        Cost: one hand-off to the worker thread per call (about 20 us on an
        idle CPU, 150 us on a busy one) plus the reward calls themselves; to
        score a whole step (many groups), pass all its trajectories in one
        call (async functions are then gathered over the step).
        tests/bench/rubric.py measures it.

        A trajectory whose scoring hits any error (an exception, a time-out,
        a reward that is not a finite number, malformed ``step_rewards``)
        gets a total reward of 0.0, not a partial sum, and the first error
        in ``error`` and ``details["error"]``.

        Args:
            examples: one example dict per trajectory (a group repeats its
                example).
            completions: one completion per trajectory (text, or the
                transcript for multi-step scenarios), same length.
            timeout_s: per-call time limit in seconds (> 0).

        Returns:
            One :class:`ScoreResult` per trajectory, in order.

        Raises:
            ValueError: the lengths differ or ``timeout_s`` is not positive.
        """
        if len(examples) != len(completions):
            raise ValueError(
                f"score_group needs one example per completion: got {len(examples)} "
                f"examples and {len(completions)} completions"
            )
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        sync_names = [m for m in self.functions if not self._async[m]]
        outcomes = self._run_sync(sync_names, examples, completions, timeout_s)
        for name in self.functions:
            if self._async[name]:
                outcomes[name] = self._run_async(name, examples, completions, timeout_s)
        outcomes = {m: outcomes[m] for m in self.functions}  # WEIGHTS order
        return [self._combine(outcomes, i) for i in range(len(completions))]

    # -- running calls -----------------------------------------------------

    def _run_sync(self, names, examples, completions, timeout_s) -> dict[str, list[_Outcome]]:
        """Run sync functions ``names`` on every trajectory, one job per hang-free stretch."""
        n = len(completions)
        results: dict[str, list[_Outcome | None]] = {m: [None] * n for m in names}
        pending = [(m, i) for m in names for i in range(n)]
        while pending:
            runnable = []
            for m, i in pending:
                if m in self._hung:
                    results[m][i] = self._hung_outcome(m)
                else:
                    runnable.append((m, i))
            if not runnable:
                break
            job = _Job([partial(self.functions[m], examples[i], completions[i]) for m, i in runnable], self.filename)
            done, stuck_at = _WORKERS.run(job, timeout_s)
            for k in range(done):
                m, i = runnable[k]
                results[m][i] = self._normalise(m, *job.results[k])
            if stuck_at is None:
                break
            m, i = runnable[done]
            self._hung[m] = job.stuck_line
            where = self._where(job.stuck_line)
            results[m][i] = _Outcome(
                error=f"{m}: TimeoutError: no answer after {timeout_s:g} s{where}",
                kind="timeout",
                line=job.stuck_line,
            )
            pending = runnable[done + 1 :]
        return results  # type: ignore[return-value]

    def _run_async(self, name, examples, completions, timeout_s) -> list[_Outcome]:
        """Run async function ``name`` on the group, gathered on one event loop."""
        import asyncio  # ~70 ms to import: the check process pays it only for async rubrics
        n = len(completions)
        if name in self._hung:
            return [self._hung_outcome(name)] * n
        fn = self.functions[name]

        async def one(example, completion):
            try:
                return "ok", await asyncio.wait_for(fn(example, completion), timeout_s)
            except asyncio.TimeoutError:
                return "timeout", None
            except (Exception, SystemExit) as exc:  # any reward-function failure
                return "raised", exc

        async def group():
            return await asyncio.gather(*(one(e, c) for e, c in zip(examples, completions)))

        # A coroutine that blocks instead of awaiting defeats wait_for; the
        # whole gathered group then runs past the limit and is abandoned.
        job = _Job([lambda: asyncio.run(group())], self.filename)
        done, _ = _WORKERS.run(job, timeout_s + 1.0)
        if done == 0:
            self._hung[name] = job.stuck_line
            where = self._where(job.stuck_line)
            message = f"{name}: TimeoutError: blocked the event loop for over {timeout_s:g} s{where}"
            return [_Outcome(error=message, kind="timeout", line=job.stuck_line)] * n
        status, value = job.results[0]
        if status == "raised":  # asyncio.run itself failed
            return [self._normalise(name, "raised", value)] * n
        outcomes = []
        for st, val in value:
            if st == "timeout":
                outcomes.append(_Outcome(error=f"{name}: TimeoutError: no answer after {timeout_s:g} s", kind="timeout"))
            else:
                outcomes.append(self._normalise(name, st, val))
        return outcomes

    def _hung_outcome(self, name: str) -> _Outcome:
        line = self._hung[name]
        message = f"{name}: hung earlier in this rubric version{self._where(line)}; scored as an error"
        return _Outcome(error=message, kind="timeout", line=line)

    def _where(self, line: int | None) -> str:
        return f" ({self._display} line {line})" if line else ""

    # -- normalising answers ----------------------------------------------

    def _normalise(self, name: str, status: str, value: Any) -> _Outcome:
        """Turn one call's raw answer (or exception) into an _Outcome."""
        if status == "raised":
            line = _line_of(value.__traceback__, self.filename)
            message = f"{name}: {type(value).__name__}: {value}{self._where(line)}"
            return _Outcome(error=message, kind="exception", line=line)
        details: Any = {}
        steps: Any = None
        reward = value
        if type(value) is dict or isinstance(value, Mapping):
            if "reward" not in value:
                return self._bad(name, f"returned a dict without 'reward' (keys {sorted(map(str, value))})")
            reward, details, steps = value["reward"], value.get("details") or {}, value.get("step_rewards")
            if not isinstance(details, Mapping):
                return self._bad(name, f"'details' must be a dict, got {type(details).__name__}")
        why = _bad_number(reward)
        if why:
            return self._bad(name, f"returned reward {reward!r:.80} ({why})")
        if steps is not None:
            steps, problem = _step_rewards(steps)
            if problem:
                return self._bad(name, problem)
        return _Outcome(reward=float(reward), details=dict(details), step_rewards=steps)

    def _bad(self, name: str, problem: str) -> _Outcome:
        """An _Outcome for a malformed answer, pointing at the function's def line."""
        line = getattr(getattr(inspect.unwrap(self.functions[name]), "__code__", None), "co_firstlineno", None)
        return _Outcome(
            error=f"{name}: {problem}; expected a finite float or "
            f"{{'reward': float, 'details': dict}}{self._where(line)}",
            kind="bad_reward",
            line=line,
        )

    def _combine(self, outcomes: dict[str, list[_Outcome]], i: int) -> ScoreResult:
        """Merge every function's outcome on trajectory ``i`` into a ScoreResult."""
        components: dict[str, float] = {}
        details: dict[str, Any] = {}
        parse_status = None
        failed: _Outcome | None = None
        with_steps = []
        for m, per_trajectory in outcomes.items():
            o = per_trajectory[i]
            components[m] = o.reward
            details[m] = o.details
            if o.error:
                details[m] = {**o.details, "error": o.error}
                failed = failed or o
            if parse_status is None:
                parse_status = o.details.get("parse_status")
            if o.step_rewards is not None:
                with_steps.append((m, o.step_rewards))
        if parse_status is not None:
            details["parse_status"] = parse_status
        lists = [(m, s) for m, s in with_steps if isinstance(s, list)]
        if lists and failed is None and len({len(s) for _, s in lists}) > 1:
            failed = _Outcome(
                error="step_rewards: functions disagree on the number of turns: "
                + ", ".join(f"{m} has {len(s)}" for m, s in lists),
                kind="bad_reward",
            )
        if failed is not None:
            details.update(error=failed.error, error_kind=failed.kind, error_line=failed.line)
            return ScoreResult(reward=0.0, components=components, details=details, error=failed.error)
        total = 0.0
        for m, r in components.items():
            total += self.weights[m] * r
        if not abs(total) <= MAX_ABS_REWARD:  # every part in range, the weighted sum is not (or nan)
            error = (f"the weighted total {total:g} of {', '.join(components)} is beyond +-{MAX_ABS_REWARD:g}: "
                     "rewards that large overflow the group statistics and the update; lower a weight or a reward")
            details.update(error=error, error_kind="bad_reward", error_line=None)
            return ScoreResult(reward=0.0, components=components, details=details, error=error)
        steps = _weighted_steps([(self.weights[m], s) for m, s in with_steps]) if with_steps else None
        return ScoreResult(reward=total, components=components, details=details, step_rewards=steps)


def _step_rewards(steps: Any) -> tuple[StepRewards, str | None]:
    """A function's ``step_rewards`` as floats, or the problem with it.

    A list gives one reward per turn; a dict maps turn indices (ints >= 0)
    to rewards.
    """
    if isinstance(steps, Mapping):
        out: dict[int, float] = {}
        for t, r in steps.items():
            if isinstance(t, bool) or not isinstance(t, int) or t < 0:
                return {}, f"step_rewards key {t!r:.40} is not a turn index (an int >= 0)"
            why = _bad_number(r)
            if why:
                return {}, f"step_rewards[{t}] is {r!r:.40} ({why})"
            out[t] = float(r)
        return out, None
    if isinstance(steps, (str, bytes)) or not isinstance(steps, Sequence):
        return [], (f"'step_rewards' must be a list of floats or a dict {{turn_index: float}}, "
                    f"got {type(steps).__name__}")
    for t, r in enumerate(steps):
        why = _bad_number(r)
        if why:
            return [], f"step_rewards[{t}] is {r!r:.40} ({why})"
    return [float(r) for r in steps], None


def _weighted_steps(weighted: list[tuple[float, StepRewards]]) -> StepRewards:
    """sum_f w_f * steps_f per turn: a list when every part is a list (of one
    length), else a dict by turn index."""
    if all(isinstance(s, list) for _, s in weighted):
        n = len(weighted[0][1])
        return [sum(w * s[t] for w, s in weighted) for t in range(n)]
    total: dict[int, float] = {}
    for w, steps in weighted:
        pairs = enumerate(steps) if isinstance(steps, list) else steps.items()
        for t, r in pairs:
            total[t] = total.get(t, 0.0) + w * r
    return total


def _bad_number(value: Any) -> str | None:
    """Why ``value`` is not a usable reward, or None when it is one."""
    if type(value) is not float and (isinstance(value, bool) or not isinstance(value, numbers.Real)):
        return f"a {type(value).__name__}, not a number"
    if not math.isfinite(value):
        return "not finite"
    if abs(float(value)) > MAX_ABS_REWARD:
        return f"beyond +-{MAX_ABS_REWARD:g}: rewards that large overflow the group statistics and the update"
    return None


# -- the worker thread ------------------------------------------------------


class _Job:
    """A batch of calls run in order on a worker thread.

    ``position`` is the index of the call running now and ``started`` its
    start (time.monotonic seconds); the watchdog reads both. ``filename`` is
    the reward file's code name, used to find the line a hung call is on.
    """

    def __init__(self, calls: list[Callable[[], Any]], filename: str):
        self.calls = calls
        self.filename = filename
        self.results: list[tuple[str, Any]] = []
        self.started = time.monotonic()
        self.position = 0
        self.finished = threading.Event()
        self.abandoned = False
        self.thread_id: int | None = None
        self.stuck_line: int | None = None

    def run(self) -> None:
        self.thread_id = threading.get_ident()
        for k, call in enumerate(self.calls):
            if self.abandoned:
                return
            # started before position: the watchdog reads them in the other order
            self.started = time.monotonic()
            self.position = k
            try:
                value = call()
                if inspect.iscoroutine(value):  # a sync function that returned a coroutine
                    import asyncio  # see _run_async

                    value = asyncio.run(value)
                self.results.append(("ok", value))
            except (Exception, SystemExit) as exc:  # any reward-function failure
                self.results.append(("raised", exc))
        self.position = len(self.calls)
        self.finished.set()

    def stuck_line_now(self) -> int | None:
        """Line the worker is executing now, in its innermost reward-file frame."""
        frame = sys._current_frames().get(self.thread_id or -1)
        while frame is not None and frame.f_code.co_filename != self.filename:
            frame = frame.f_back
        return frame.f_lineno if frame is not None else None


class _WorkerPool:
    """One daemon worker thread, replaced when a job hangs in it.

    Daemon threads never block interpreter exit, so an abandoned (hung)
    worker cannot keep the engine process alive.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue[_Job] | None = None

    @staticmethod
    def _start() -> queue.SimpleQueue[_Job]:
        jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()

        def loop() -> None:
            while True:
                jobs.get().run()

        threading.Thread(target=loop, name="rubric-worker", daemon=True).start()
        return jobs

    def run(self, job: _Job, timeout_s: float) -> tuple[int, int | None]:
        """Run ``job`` with a per-call limit of ``timeout_s`` seconds.

        Returns:
            (number of calls finished, index of the call that hung or None).
        """
        with self._lock:
            if self._queue is None:
                self._queue = self._start()
            self._queue.put(job)
            while not job.finished.wait(max(0.0, job.started + timeout_s - time.monotonic())):
                position = job.position
                if time.monotonic() - job.started >= timeout_s and job.position == position:
                    job.abandoned = True
                    job.stuck_line = job.stuck_line_now()
                    self._queue = None  # the next job gets a fresh thread
                    return position, position
            return len(job.calls), None


_WORKERS = _WorkerPool()
