"""A user's task from files: ``task.toml`` + data + ``rewards.py`` [+ ``env.py``].

``rlab run --task PATH`` (PATH a folder holding ``task.toml``, or the toml
itself) builds a :class:`TaskScenario`, which the engine runs like a
built-in scenario (the ``Scenario`` protocol of ``scenarios``). The keys
are fixed by :class:`TaskSpec` (see docs/tasks.md); data files are read
with the ``datasets`` library (JSONL, CSV, Parquet, or a ``save_to_disk``
folder). Paths are relative to the toml file.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlab.engine.validation import Problem, one_line
from rlab.scenarios import third_party
from rlab.scenarios.task_env import load_env_factory
from rlab.scenarios.task_scenario import (HELD_OUT_FRACTION, HELD_OUT_SEED, TaskError, TaskScenario,
                                          ToolTaskScenario, held_out_split)

DATA_FORMATS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}


class TaskSpec(BaseModel):
    """The keys of ``task.toml`` (unknown keys are errors).

    Paths (``train``, ``eval``, ``rewards``, the file part of ``env``) are
    relative to the toml's folder. ``max_new_tokens`` is the task's default
    completion length (tokens per turn); a ``--max-new-tokens`` flag or a
    run-config key overrides it. ``env`` names a multi-step environment class
    as ``"env.py:ClassName"`` (protocol in docs/tasks.md); ``max_turns``
    bounds its episodes (assistant turns). ``tools`` names a file of typed,
    documented functions the policy may call (a tool task: its episodes end on
    an answer without a call, or at ``max_turns``); ``transcripts`` a file of
    conversations (a ``messages`` column) the tiny policy warm-starts on, for
    ``warm_start_steps`` steps; ``demonstrations`` a file of the same kind that a
    real model's warm start trains its LoRA adapter on instead (conversations that
    do the task right; without it, the transcripts). ``agent`` names a user's own agent
    (``async def rollout(client, model, example)``, ``engine.agent``) that
    plays the task's rollouts instead (``--agent``). ``success`` names the reward
    function that says a trajectory solved the task (its unweighted value
    >= ``success_threshold``); without it, pass@1 is total reward >= 1.
    """

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    train: str
    eval: str | None = None
    prompt_field: str = "prompt"
    answer_field: str = "answer"
    id_field: str = "id"
    system_prompt: str | None = None
    rewards: str
    max_new_tokens: int | None = Field(None, ge=1)
    env: str | None = None
    tools: str | None = None
    agent: str | None = None
    transcripts: str | None = None
    demonstrations: str | None = None
    warm_start_steps: int = Field(600, ge=1, le=100_000)
    max_turns: int = Field(8, ge=1)
    success: str | None = Field(None, min_length=1)
    success_threshold: float = Field(1.0, allow_inf_nan=False)


SpecT = TypeVar("SpecT", bound=BaseModel)


class ReasoningGymSpec(BaseModel):
    """A task file (or ``[task]`` table) that names a reasoning-gym dataset with its settings.

    ``reasoning_gym`` is the dataset name, ``config`` its generator's
    settings, ``system_prompt`` replaces reasoning-gym's default one (a
    135 M model follows a short prompt with an example better),
    ``rewards`` a reward file (relative to the toml) that replaces the
    generated one, ``max_new_tokens`` is the task's default completion
    length in tokens, and ``success`` the reward function that says a
    problem is solved (the generated file's ``correct``: the dataset's own
    ``score_answer``).
    ``--task reasoning-gym:NAME`` is the same with every default.
    """

    model_config = ConfigDict(extra="forbid")

    reasoning_gym: str
    config: dict[str, Any] = Field(default_factory=dict)
    system_prompt: str | None = None
    rewards: str | None = None
    max_new_tokens: int | None = Field(None, ge=1)
    success: str = Field("correct", min_length=1)
    success_threshold: float = Field(1.0, allow_inf_nan=False)


def load_task(ref: str | Path | Mapping[str, Any]) -> Any:
    """The scenario of a task reference.

    Args:
        ref: a folder holding ``task.toml``, a toml file, a table of task
            keys (a ``[task]`` table of a run file, paths already absolute
            or relative to the working folder), ``"reasoning-gym:NAME"`` or
            ``"verifiers:MODULE"``.

    Raises:
        TaskError: missing file, unknown key, bad value, missing column,
            unknown data format; the message says which and how to fix it.
        scenarios.third_party.MissingExtraError: the optional package is
            not installed (the message has the install command).
    """
    if isinstance(ref, Mapping):
        return _from_table(dict(ref), Path.cwd(), "[task]")
    text = str(ref)
    kind, _, name = text.partition(":")
    if kind in ("reasoning-gym", "verifiers") and name:
        return third_party.reasoning_gym_task(name) if kind == "reasoning-gym" else third_party.verifiers_task(name)
    path = Path(text)
    toml_path = path / "task.toml" if path.is_dir() else path
    if not toml_path.is_file():
        raise TaskError(f"--task {text}: no task.toml there; give a folder holding task.toml, the toml "
                        "file itself, reasoning-gym:NAME or verifiers:MODULE")
    try:
        raw = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as err:
        raise TaskError(f"{toml_path}: not valid TOML: {err}") from None
    return _from_table(raw, toml_path.parent, str(toml_path))


def _from_table(raw: dict[str, Any], base: Path, where: str) -> TaskScenario:
    if "reasoning_gym" in raw:
        spec = _validated(ReasoningGymSpec, raw, where)
        task = third_party.reasoning_gym_task(spec.reasoning_gym, spec.config)
        rewards = task.reward_file if spec.rewards is None else _existing(base, spec.rewards, "rewards", where)
        return replace(task, system_prompt=spec.system_prompt or task.system_prompt,
                       max_new_tokens=spec.max_new_tokens or task.max_new_tokens,
                       success=spec.success, success_threshold=spec.success_threshold, reward_file=rewards)
    return _from_spec(_validated(TaskSpec, raw, where), base, where)


def _validated(model: type[SpecT], raw: dict[str, Any], where: str) -> SpecT:
    try:
        return model.model_validate(raw)
    except ValidationError as err:
        raise TaskError(f"{where}: {_validation_message(err, model)}") from None


def _validation_message(err: ValidationError, model: type[BaseModel]) -> str:
    def describe(problem: Problem) -> str:
        key = problem.key
        if problem.kind == "extra_forbidden":
            return f"unknown key {key!r} (known keys: {', '.join(model.model_fields)})"
        return f"missing key {key!r}" if problem.kind == "missing" else f"{key}: {problem.rule}"

    return one_line(err, describe)


def _from_spec(spec: TaskSpec, base: Path, where: str) -> TaskScenario:
    rewards = _existing(base, spec.rewards, "rewards", where)
    _check_syntax(rewards, where)
    train_path = _existing(base, spec.train, "train", where)
    train = _examples(read_rows(train_path, "train", where), spec, "train", where)
    info: dict[str, Any] = {"train": str(train_path)}
    if spec.eval is not None:
        eval_path = _existing(base, spec.eval, "eval", where)
        held_out = _examples(read_rows(eval_path, "eval", where), spec, "eval", where)
        info |= {"eval": str(eval_path), "held_out": None}
    else:
        train, held_out = held_out_split(train)
        info |= {"eval": None, "held_out": f"{HELD_OUT_FRACTION:.0%} of train, seed {HELD_OUT_SEED}"}
    info |= {"train_rows": len(train), "eval_rows": len(held_out)}
    name = spec.name or (base.name if Path(where).name == "task.toml" else Path(where).stem)
    common: dict[str, Any] = dict(name=name, system_prompt=spec.system_prompt, reward_file=rewards, train=train, eval=held_out,
                  dataset_info=info, max_new_tokens=spec.max_new_tokens, max_turns=spec.max_turns,
                  success=spec.success, success_threshold=spec.success_threshold,
                  agent_file=None if spec.agent is None else _existing(base, spec.agent, "agent", where))
    if spec.tools is not None:
        if spec.env is not None:
            raise TaskError(f"{where}: a task has tools or an env, not both: the tools are its environment")
        transcripts = _transcripts(spec.transcripts, "transcripts", base, where)
        demonstrations = _transcripts(spec.demonstrations, "demonstrations", base, where)
        return ToolTaskScenario(**common, tools_file=_existing(base, spec.tools, "tools", where),
                                transcripts=transcripts, demonstration_transcripts=demonstrations,
                                warm_start_target=None, warm_start_steps=spec.warm_start_steps)
    for key in ("transcripts", "demonstrations"):
        if getattr(spec, key) is not None:
            raise TaskError(f"{where}: {key} warm-start a tool task's policy; add tools = \"tools.py\"")
    factory = None if spec.env is None else load_env_factory(base, spec.env, where)
    return TaskScenario(**common, env_factory=factory)


def _transcripts(name: str | None, key: str, base: Path, where: str) -> list[list[dict[str, Any]]]:
    """The conversations of the ``key`` file ``name`` (``transcripts`` or ``demonstrations``;
    None: none): its ``messages`` column, OpenAI messages, a call's ``arguments`` as JSON
    text, as OpenAI writes them."""
    if name is None:
        return []
    path = _existing(base, name, key, where)
    rows = read_rows(path, key, where)
    for i, row in enumerate(rows):
        if not _is_messages(row.get("messages")):
            raise TaskError(f"{where}: {key} row {i}: needs a 'messages' column holding a list of chat "
                            "messages {role, content}")
    # datasets gives every message every key any message has (None where absent): drop those
    return [[{k: v for k, v in m.items() if v is not None} for m in row["messages"]] for row in rows]


def _check_syntax(path: Path, where: str) -> None:
    """A reward file that does not parse is named before any data is read
    (compiling runs none of its code)."""
    try:
        compile(path.read_text(encoding="utf-8"), str(path), "exec")
    except SyntaxError as err:
        raise TaskError(f"{where}: rewards = {path.name}: line {err.lineno}: SyntaxError: {err.msg}; "
                        "fix the file and start again") from None
    except (UnicodeDecodeError, ValueError) as err:
        raise TaskError(f"{where}: rewards = {path.name} is not Python source text ({err})") from None


#: The longest prompt a task row may hold (characters): a 50 MB line made the
#: tokenizer allocate 5 GB and abort the process before any length check.
MAX_PROMPT_CHARS = 100_000


def _existing(base: Path, relative: str, key: str, where: str) -> Path:
    path = (base / relative).resolve()
    if not path.exists():
        raise TaskError(f"{where}: {key} = {relative!r}: no such file or folder ({path})")
    return path


def read_rows(path: Path, key: str, where: str) -> list[dict[str, Any]]:
    """Rows of a data file or ``save_to_disk`` folder, read with the ``datasets`` library.

    Raises:
        TaskError: an unknown format, a folder that is not a saved dataset,
            a saved DatasetDict without the split, or a file datasets cannot read.
    """
    import datasets

    datasets.disable_progress_bars()  # a run's log is for the run, not for a parser's progress
    try:
        with _quiet_datasets():
            return _load_rows(path, key, where)
    except TaskError:
        raise
    except StopIteration:  # datasets' JSON reader on an empty file
        raise TaskError(f"{where}: {key} = {path.name} has no rows; add some, or point {key} at another file") from None
    except (FileNotFoundError, ValueError, datasets.exceptions.DatasetGenerationError) as err:
        raise TaskError(f"{where}: {key} = {path.name}: {_parse_problem(err, path)}") from None


@contextmanager
def _quiet_datasets() -> Iterator[None]:
    """``datasets`` logs nothing below CRITICAL while it reads: a file it cannot parse is one
    TaskError with the parser's reason, and its own "Failed to load JSON from file ..." line on
    stderr would come before that error line, and say less."""
    from datasets.utils import logging as datasets_logging

    previous = datasets_logging.get_verbosity()
    datasets_logging.set_verbosity(datasets_logging.CRITICAL)
    try:
        yield
    finally:
        datasets_logging.set_verbosity(previous)


def _load_rows(path: Path, key: str, where: str) -> list[dict[str, Any]]:
    """Rows of ``path`` as ``datasets`` reads them (:func:`read_rows` turns its errors into TaskError)."""
    import datasets

    if path.is_dir():
        data = datasets.load_from_disk(str(path))
        if isinstance(data, datasets.DatasetDict):
            if key not in data:
                raise TaskError(f"{where}: {key} = {path} holds splits {sorted(data)}, none named {key!r}; "
                                "point at one split's folder")
            data = data[key]
        return data.to_list()
    builder = DATA_FORMATS.get(path.suffix.lower())
    if builder is None:
        raise TaskError(f"{where}: {key} = {path.name}: unknown data format {path.suffix!r}; use "
                        f"{', '.join(DATA_FORMATS)} or a datasets save_to_disk folder")
    return datasets.load_dataset(builder, data_files=str(path), split="train").to_list()


def _parse_problem(err: BaseException, path: Path) -> str:
    """What the parser said, not datasets' wrapper: "An error occurred while
    generating the dataset" hides the cause (a JSON error and its row, a CSV
    quote left open). JSON Lines rows are counted from 0 there: said as lines."""
    if "corresponds to no data" in str(err):
        return "it has no rows; add some, or point the key at another file"
    cause = err.__cause__ or err.__context__ or err
    text = str(cause).strip() or type(cause).__name__
    row = re.search(r"\bin row (\d+)", text)
    if row is not None and path.suffix.lower() == ".jsonl":
        text = f"line {int(row[1]) + 1}: {text[:row.start()].strip().rstrip('.')}"
    return f"cannot read it ({text}); fix the file (it is read with the datasets library)"


def _examples(rows: list[dict[str, Any]], spec: TaskSpec, key: str, where: str) -> list[dict[str, Any]]:
    """Rows as examples: every column, plus ``id``, ``prompt`` and ``answer``."""
    columns = list(rows[0]) if rows else []
    needed = [("prompt_field", spec.prompt_field)] if spec.env is None or "prompt_field" in spec.model_fields_set \
        else []
    if "answer_field" in spec.model_fields_set:
        needed.append(("answer_field", spec.answer_field))
    if "id_field" in spec.model_fields_set:
        needed.append(("id_field", spec.id_field))
    for option, column in needed:
        if column not in columns:
            raise TaskError(f"{where}: {option} = {column!r}, but {key} has no such column; "
                            f"its columns: {', '.join(columns) or '(none)'}")
    if not rows:
        raise TaskError(f"{where}: {key} has no rows")
    examples = [_example(i, row, spec, key, where) for i, row in enumerate(rows)]
    seen: dict[Any, int] = {}
    for i, example in enumerate(examples):
        first = seen.setdefault(example["id"], i)
        if first != i:  # rows of one id would share their groups, results and compare pairs
            raise TaskError(f"{where}: {key} rows {first} and {i} have the same {spec.id_field} {example['id']!r}; "
                            f"ids must be unique (drop the id column to number the rows)")
    return examples


def _example(i: int, row: dict[str, Any], spec: TaskSpec, key: str, where: str) -> dict[str, Any]:
    prompt = row.get(spec.prompt_field, "")
    if not isinstance(prompt, str) and not _is_messages(prompt):
        raise TaskError(f"{where}: {key} row {i}: {spec.prompt_field!r} must be a string or a list of chat "
                        f"messages {{role, content}}, got {type(prompt).__name__}")
    size = len(prompt) if isinstance(prompt, str) else sum(len(str(m.get("content", ""))) for m in prompt)
    if size > MAX_PROMPT_CHARS:
        raise TaskError(f"{where}: {key} row {i}: the prompt is {size:,} characters; the limit is "
                        f"{MAX_PROMPT_CHARS:,} (a model's whole context is a few thousand tokens); shorten it")
    answer = row.get(spec.answer_field, "")
    example_id = row.get(spec.id_field, i)  # the row number when there is no id column
    return {**row, "id": example_id, "prompt": prompt, "answer": "" if answer is None else answer}


def _is_messages(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(m, Mapping) and "role" in m and "content" in m
                                           for m in value)
