"""The reward functions a GRPOTrainer calls, through the lab: versions that change at a step boundary.

TRL calls each entry of ``trainer.reward_funcs`` as ``f(prompts=...,
completions=..., completion_ids=..., **dataset columns, trainer_state=...,
log_extra=..., log_metric=...)`` on every process, for that process's share
of the generation batch, then gathers the rewards and weighs them with
``trainer.reward_weights``. :class:`TrlRewards` puts one
:class:`RewardSlot` of ours in the place of each of the user's reward
functions (reward *models*, ``nn.Module`` entries, stay as they are), and
re-installs the trainer's four lists (functions, names, weights,
processing classes) when the version changes, on every process at the same
step boundary (:mod:`rlab.engine.integrations.trl` decides when).

Where the user's code runs:

- **Version 1** is what the script gave GRPOTrainer: each slot calls the
  user's function exactly as TRL would (same arguments, in the trainer's
  process, batched); an exception there is TRL's, as without the lab.
- **Edited versions** (a reward file sent with ``rlab reward`` or the
  TUI's editor) are scored the lab's way: in the lab's scoring process
  (``engine.rewards.scoring_process``, one per trainer process; memory-capped,
  per-call time limit, a hang killed and the process replaced), with the
  rubric's contract (a failing function gives that completion 0 and an
  error, never an exception in the trainer). Each slot returns its
  function's unweighted value; TRL applies the weights.

Besides scoring, the first slot's call gathers every process's rows of the
batch to the main process (:class:`Ranks.gather`): the dataset example
behind each completion (its JSON-serialisable columns, for the dry run of
the next edit), the reward version that scored it, the process that did,
and any scoring error. The main process stores them with the step.

:func:`functions_source` turns the script's reward functions into a reward
file (the functions, what they use from their module, and ``WEIGHTS``), so
version 1 is recorded like any rubric version and the TUI's editor opens it.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import math
import symtable
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlab.engine.integrations.trl_ranks import Ranks
from rlab.engine.rewards.score_result import ScoreResult
from rlab.engine.rewards.scoring_process import RubricVersion, ScoringProcess
from rlab.engine.rewards.time_limits import DEFAULT_TIMEOUT_S

#: Keyword arguments TRL passes that are not dataset columns.
TRL_KWARGS = frozenset({"prompts", "completions", "completion_ids", "trainer_state", "log_extra",
                        "log_metric", "environments"})


@dataclass
class GenerationRows:
    """One generation batch as the main process gathered it (every process, rank order).

    ``rows``: one dict per completion: ``key`` (``repr`` of the prompt, to
    match TRL's own log of the batch), ``example`` (the prompt and the
    JSON-serialisable dataset columns), ``version`` (the reward version that
    scored it), ``rank`` (the process that did) and ``error`` (a scoring
    error of an edited version, else None). ``weights``: every reward
    column's TRL weight when the batch was scored (its total is their
    weighted sum).
    """

    mode: str
    rows: list[dict[str, Any]]
    weights: dict[str, float] = field(default_factory=dict)


@dataclass
class RewardVersion:
    """One version of the run's reward functions.

    Attributes:
        number: 1 for what the script gave GRPOTrainer, then 2, 3, ... per applied edit.
        weights: function name -> TRL reward weight, in slot order.
        functions: version 1: name -> the user's callable (run as TRL runs it).
        rubric: edited versions: the reward file (scored in the lab's scoring process).
    """

    number: int
    weights: dict[str, float]
    functions: dict[str, Callable[..., Any]] | None = None
    rubric: RubricVersion | None = None


@dataclass
class FixedReward:
    """A reward function an edit does not replace (a reward model, the judge)."""

    name: str
    func: Any
    weight: float
    processing_class: Any = None


class RewardSlot:
    """One of the trainer's reward functions, as GRPOTrainer sees it: it
    answers for function ``name`` of the current version of ``owner``."""

    def __init__(self, owner: TrlRewards, name: str) -> None:
        self.owner = owner
        self.name = name
        self.__name__ = name

    def __call__(self, prompts: list | None = None, completions: list | None = None,
                 completion_ids: list | None = None, **kwargs: Any) -> list[float | None]:
        return self.owner.score(self.name, prompts or [], completions or [], completion_ids, kwargs)

    def __repr__(self) -> str:
        return f"RewardSlot({self.name!r}, version {self.owner.version.number})"


@dataclass
class _Batch:
    completions: list
    results: list[ScoreResult] | None = None


@dataclass
class TrlRewards:
    """The trainer's reward functions, behind slots of ours (see the module doc).

    Build it on every process, before ``trainer.train()``; it installs
    itself into ``trainer`` at once.

    Args:
        trainer: the GRPOTrainer.
        ranks: its processes.
        timeout_s: per-call limit of an edited version's functions, seconds.
    """

    trainer: Any
    ranks: Ranks
    timeout_s: float = DEFAULT_TIMEOUT_S
    version: RewardVersion = field(init=False)
    fixed: list[FixedReward] = field(init=False, default_factory=list)
    #: main process: the latest train generation gathered and not yet stored
    pending: GenerationRows | None = field(init=False, default=None)
    #: every process: generations scored so far (train and eval)
    generations: int = field(init=False, default=0)
    _scoring: ScoringProcess | None = field(init=False, default=None)
    _batch: _Batch | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        import torch

        t = self.trainer
        funcs, names = list(t.reward_funcs), list(t.reward_func_names)
        weights = [float(w) for w in t.reward_weights.tolist()]
        classes = list(getattr(t, "reward_processing_classes", None) or [None] * len(funcs))
        editable: dict[str, Callable[..., Any]] = {}
        editable_weights: dict[str, float] = {}
        for func, name, weight, processing_class in zip(funcs, names, weights, classes):
            if isinstance(func, torch.nn.Module):
                self.fixed.append(FixedReward(name, func, weight, processing_class))
            else:
                editable[name], editable_weights[name] = func, weight
        self.version = RewardVersion(1, editable_weights, functions=editable)
        self.install()

    # -- the trainer's lists ---------------------------------------------------

    @property
    def names(self) -> list[str]:
        """The reward columns TRL logs now: the version's functions, then the fixed ones."""
        return [*self.version.weights, *(f.name for f in self.fixed)]

    def install(self) -> None:
        """Point the trainer's reward lists at the current version's slots and the fixed rewards."""
        import torch

        t, names = self.trainer, list(self.version.weights)
        t.reward_funcs = [*(RewardSlot(self, n) for n in names), *(f.func for f in self.fixed)]
        t.reward_func_names = [*names, *(f.name for f in self.fixed)]
        t.reward_weights = torch.tensor([*self.version.weights.values(), *(f.weight for f in self.fixed)],
                                        dtype=torch.float32)
        t.reward_processing_classes = [*([None] * len(names)), *(f.processing_class for f in self.fixed)]

    def add_fixed(self, reward: FixedReward) -> None:
        """One more reward function no edit replaces (the judge), last in the list."""
        self.fixed.append(reward)
        self.install()

    # -- scoring ---------------------------------------------------------------

    def score(self, name: str, prompts: list, completions: list, completion_ids: list | None,
              kwargs: dict[str, Any]) -> list[float | None]:
        """Function ``name``'s rewards for this process's share of the batch (TRL's contract)."""
        batch = self._batch
        first = bool(self.version.weights) and name == next(iter(self.version.weights))
        if first or batch is None or batch.completions is not completions:
            batch = self._begin(prompts, completions, kwargs, gather=first)
        if self.version.rubric is not None:
            assert batch.results is not None
            return [_component(result, name) for result in batch.results]
        assert self.version.functions is not None
        func = self.version.functions[name]
        out = func(prompts=prompts, completions=completions, completion_ids=completion_ids, **kwargs)
        if inspect.isawaitable(out):
            out = self._wait(out)
        return out

    def _begin(self, prompts: list, completions: list, kwargs: dict[str, Any], *, gather: bool) -> _Batch:
        """A new batch: score it (edited versions), and gather its rows to the main process."""
        n = len(completions)
        examples = [example_of(prompts, kwargs, i, n) for i in range(n)]
        batch = _Batch(completions)
        if self.version.rubric is not None:
            texts = [completion_text(c) for c in completions]
            batch.results = self.scoring().score(self.version.rubric, examples, texts, self.timeout_s)
        self._batch = batch
        if gather:
            self.generations += 1
            errors = [r.error for r in batch.results] if batch.results is not None else [None] * n
            rows = [{"key": repr(prompts[i]), "example": examples[i], "version": self.version.number,
                     "rank": self.ranks.index, "error": errors[i]} for i in range(n)]
            gathered = self.ranks.gather(rows)
            training = bool(getattr(getattr(self.trainer, "model", None), "training", True))
            if self.ranks.is_main and training:
                weights = [float(w) for w in self.trainer.reward_weights.tolist()]
                self.pending = GenerationRows("train", gathered, dict(zip(self.names, weights)))
            self._prune_logs()
        return batch

    def _prune_logs(self) -> None:
        """Drop TRL's logged reward columns of functions the version no longer has
        (else a stale column would sit in the completions table next to the new ones)."""
        logs = getattr(self.trainer, "_logs", None)
        columns = logs.get("rewards") if isinstance(logs, dict) else None
        if columns is not None:
            for name in [k for k in columns if k not in self.names]:
                del columns[name]

    def _wait(self, awaitable: Any) -> Any:
        """An async version-1 reward function's answer (on TRL's own loop when it has one)."""
        loop = getattr(self.trainer, "async_loop", None)
        if loop is not None and loop.is_running():
            return asyncio.run_coroutine_threadsafe(awaitable, loop).result()
        return asyncio.run(awaitable)

    # -- versions ----------------------------------------------------------------

    def scoring(self) -> ScoringProcess:
        """This process's scoring process (started at the first edited version)."""
        if self._scoring is None:
            self._scoring = ScoringProcess()
        return self._scoring

    def probe(self, rubric: RubricVersion, samples: Sequence[tuple[dict, Any]]) -> str | None:
        """Load ``rubric`` in this process's scoring process and score ``samples``;
        the first error, or None when all scored (or there was nothing to score)."""
        if not samples:
            return None
        results = self.scoring().score(rubric, [e for e, _ in samples], [c for _, c in samples], self.timeout_s)
        return next((r.error for r in results if r.error), None)

    def switch(self, number: int, rubric: RubricVersion) -> None:
        """Make ``rubric`` version ``number`` and install it (call on every process at once)."""
        self.version = RewardVersion(number, dict(rubric.weights), rubric=rubric)
        self._batch = None
        self.install()

    def close(self) -> None:
        """Stop this process's scoring process, if one was started."""
        if self._scoring is not None:
            self._scoring.close()
            self._scoring = None


def _component(result: ScoreResult, name: str) -> float | None:
    """One function's value in a rubric's verdict, as TRL takes it: 0 for a
    completion whose scoring failed (its total is 0, as in the lab), None
    where the function said it does not apply."""
    if result.error is not None:
        return 0.0
    details = result.details.get(name)
    if isinstance(details, dict) and details.get("applies") is False:
        return None
    value = result.components.get(name)
    return None if value is None or not math.isfinite(value) else float(value)


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def example_of(prompts: list, kwargs: Mapping[str, Any], i: int, n: int) -> dict[str, Any]:
    """The dataset example behind completion ``i`` as the lab's rubric takes it:
    ``prompt`` (text or messages) and every dataset column TRL passed (lists
    of ``n``), the JSON-serialisable ones only (images and the like are left out)."""
    example = {"prompt": prompts[i] if i < len(prompts) else None}
    for key, values in kwargs.items():
        if key in TRL_KWARGS or not isinstance(values, list) or len(values) != n:
            continue
        if _jsonable(values[i]):
            example[key] = values[i]
    return example


def completion_text(completion: Any) -> str:
    """A TRL completion (text, or a list of chat messages) as text: the last assistant message's content."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        for message in reversed(completion):
            if isinstance(message, dict) and message.get("role", "assistant") == "assistant":
                content = message.get("content")
                return content if isinstance(content, str) else json.dumps(content)
    return str(completion)


# -- version 1 as a reward file ---------------------------------------------------


def functions_source(functions: Mapping[str, Callable[..., Any]], weights: Mapping[str, float],
                     header: str = "") -> tuple[str | None, str]:
    """A reward file with the given functions: each one's source, every
    module-level statement it uses from its file (imports, constants,
    helpers; transitively), and ``WEIGHTS``.

    Args:
        functions: TRL name -> callable, as GRPOTrainer has them.
        weights: TRL name -> reward weight.
        header: a comment put first.

    Returns:
        (source, "") when every function is a module-level ``def`` whose
        name is its TRL name; (None, why) otherwise (a lambda, a function
        defined inside another, a ``functools.partial``, a callable object,
        no source file). The source is not run here; check it before use.
    """
    by_file: dict[str, list[str]] = {}
    for name, fn in functions.items():
        if not inspect.isfunction(fn) or fn.__name__ != name or fn.__name__ == "<lambda>":
            return None, f"reward function {name!r} is not a plain function (a lambda, partial or object)"
        if "<locals>" in fn.__qualname__:
            return None, f"reward function {name!r} is defined inside another function"
        try:
            path = inspect.getsourcefile(fn)
        except TypeError:
            path = None
        if path is None or not Path(path).is_file():
            return None, f"the source of reward function {name!r} is not in a file"
        by_file.setdefault(path, []).append(name)
    parts: list[str] = []
    future = False
    for path, names in by_file.items():
        text = Path(path).read_text(encoding="utf-8")
        kept, has_future = _closure(text, path, names)
        future = future or has_future
        parts.append(f"# from {Path(path).name}\n" + "\n\n".join(kept))
    literal = ", ".join(f"{json.dumps(n)}: {float(w)!r}" for n, w in weights.items())
    parts.append(f"WEIGHTS = {{{literal}}}")
    head = [header.rstrip("\n")] if header else []
    if future:  # only comments may come before it
        head.append("from __future__ import annotations")
    return "\n\n".join(head) + ("\n\n\n" if head else "") + "\n\n\n".join(parts) + "\n", ""


def _bound_names(node: ast.stmt) -> set[str]:
    """Names a module-level statement binds."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"}
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        targets = [node.target]
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _globals_of(table: symtable.SymbolTable) -> set[str]:
    """Global names a function's (or class's) table and its nested tables use."""
    found = {s.get_name() for s in table.get_symbols() if s.is_global() and s.is_referenced()}
    for child in table.get_children():
        found |= _globals_of(child)
    return found


def _closure(text: str, path: str, names: Sequence[str]) -> tuple[list[str], bool]:
    """The module-level statements of ``text`` that define ``names`` and what they use, in file order."""
    tree = ast.parse(text)
    tables = {t.get_name(): t for t in symtable.symtable(text, path, "exec").get_children()}
    binders: dict[str, list[int]] = {}
    for index, node in enumerate(tree.body):
        for bound in _bound_names(node):
            binders.setdefault(bound, []).append(index)
    keep: set[int] = set()
    todo = list(names)
    while todo:
        for index in binders.get(todo.pop(), []):
            if index in keep:
                continue
            keep.add(index)
            node = tree.body[index]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in tables:
                # the body's globals; decorators, defaults and annotations run at module level
                outer: list[ast.AST] = list(node.decorator_list)
                if not isinstance(node, ast.ClassDef):
                    outer += [node.args, *([node.returns] if node.returns else [])]
                else:
                    outer += [*node.bases, *node.keywords]
                used = _globals_of(tables[node.name])
                used |= {n.id for part in outer for n in ast.walk(part) if isinstance(n, ast.Name)}
            else:
                used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            todo.extend(used)
    future = any(isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in tree.body)
    lines = text.splitlines()
    kept = []
    for index in sorted(keep):
        node = tree.body[index]
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            continue
        start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        kept.append("\n".join(lines[start - 1:node.end_lineno]))
    return kept, future
