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
This module loads the file and holds the Rubric type; the other jobs have
their own modules: answers checked and combined into a ScoreResult
(``engine.rewards.score_result``), calls run with time limits
(``engine.rewards.time_limits``), WEIGHTS read and rewritten in the file's
text (``engine.rewards.weights_source``).
"""

from __future__ import annotations

import hashlib
import inspect
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from rlab.engine.rewards import signatures
from rlab.engine.rewards.rubric_errors import RubricError, where
from rlab.engine.rewards.score_result import Outcome, ScoreResult, combine, outcome_of
from rlab.engine.rewards.time_limits import DEFAULT_TIMEOUT_S, run_gathered, run_in_order
from rlab.engine.rewards.user_source import read_source, run_source
from rlab.engine.rewards.weights_source import weights_line


def _check_weights(raw: Any, namespace: dict[str, Any], source: str, display: str,
                   module_name: str = "") -> dict[str, float]:
    """Validate ``WEIGHTS`` against the module namespace; return name -> float.

    The reward functions are those WEIGHTS names plus every public function
    the file defines with a reward-function signature; the ones WEIGHTS
    does not name weigh 1.0 (WEIGHTS itself is optional). No discovery
    without ``module_name`` (re-weighting a loaded rubric).
    """
    line = weights_line(source)
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
    source, code_name = read_source(path_or_source, filename)
    display = Path(code_name).name
    module = run_source(source, code_name, "_rubric")
    name = module.__name__
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
        return [combine(outcomes, self.weights, i) for i in range(len(completions))]

    # -- running calls -----------------------------------------------------

    def _run_sync(self, names: list[str], examples: Sequence[Mapping[str, Any]], completions: Sequence[Any],
                  timeout_s: float) -> dict[str, list[Outcome]]:
        """Run sync functions ``names`` on every trajectory, one batch per hang-free stretch."""
        n = len(completions)
        results: dict[str, list[Outcome | None]] = {m: [None] * n for m in names}
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
            calls = [partial(self.functions[m], examples[i], completions[i]) for m, i in runnable]
            ran = run_in_order(calls, timeout_s, self.filename)
            for (m, i), (status, value) in zip(runnable, ran.answers):
                results[m][i] = self._outcome(m, status, value)
            if not ran.hung:
                break
            done = len(ran.answers)
            m, i = runnable[done]
            self._hung[m] = ran.stuck_line
            results[m][i] = Outcome(
                error=f"{m}: TimeoutError: no answer after {timeout_s:g} s{self._where(ran.stuck_line)}",
                kind="timeout",
                line=ran.stuck_line,
            )
            pending = runnable[done + 1 :]
        return results  # type: ignore[return-value]

    def _run_async(self, name: str, examples: Sequence[Mapping[str, Any]], completions: Sequence[Any],
                   timeout_s: float) -> list[Outcome]:
        """Run async function ``name`` on the group, gathered on one event loop."""
        n = len(completions)
        if name in self._hung:
            return [self._hung_outcome(name)] * n
        ran = run_gathered(self.functions[name], list(zip(examples, completions)), timeout_s, self.filename)
        if ran.hung:
            self._hung[name] = ran.stuck_line
            where = self._where(ran.stuck_line)
            message = f"{name}: TimeoutError: blocked the event loop for over {timeout_s:g} s{where}"
            return [Outcome(error=message, kind="timeout", line=ran.stuck_line)] * n
        outcomes = []
        for status, value in ran.answers:
            if status == "timeout":
                outcomes.append(Outcome(error=f"{name}: TimeoutError: no answer after {timeout_s:g} s", kind="timeout"))
            else:
                outcomes.append(self._outcome(name, status, value))
        return outcomes

    def _outcome(self, name: str, status: str, value: Any) -> Outcome:
        return outcome_of(name, status, value, self.functions[name], self.filename)

    def _hung_outcome(self, name: str) -> Outcome:
        line = self._hung[name]
        message = f"{name}: hung earlier in this rubric version{self._where(line)}; scored as an error"
        return Outcome(error=message, kind="timeout", line=line)

    def _where(self, line: int | None) -> str:
        return where(self.filename, line)
