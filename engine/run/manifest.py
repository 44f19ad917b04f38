"""The run manifest: what must agree before two runs may be compared.

The "locked room" rule (docs/architecture.md): runs are compared only when their
manifests agree on dataset, prompts, scorer and sampling settings. Each
input is hashed (sha256 of a canonical JSON or of the file bytes), so a
hash changes when, and only when, its input changes.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from rlab.engine.types import ToolScenario

SAMPLING_FIELDS = ("temperature", "max_new_tokens", "group_size", "prompts_per_step")

LOCKED_FIELDS = ("dataset", "prompt", "scorer", "sampling", "split")
"""Top-level manifest fields that must agree for two runs to be compared
(the locked-room rule): every leaf under them is compared."""

FINGERPRINT_PACKAGES = ("rollout-lab", "torch", "transformers", "tokenizers", "peft", "numpy")


def sha256_json(value: Any) -> str:
    """sha256 hex digest of ``value`` as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def sha256_files(directory: Path, patterns: tuple[str, ...] = ("*.safetensors", "*.bin")) -> str:
    """sha256 over the weight files of a model directory, in name order.

    Read once per file list, size and modification time: a real model's start asks twice (the
    warm start's cache key, the manifest), and SmolLM2's 540 MB take 1-2 s to read.
    """
    files = [path for pattern in patterns for path in sorted(directory.glob(pattern))]
    return _sha256_of(tuple((str(path), *_size_and_mtime(path)) for path in files))


def _size_and_mtime(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


@functools.lru_cache(maxsize=16)
def _sha256_of(files: tuple[tuple[str, int, int], ...]) -> str:
    digest = hashlib.sha256()
    for name, _, _ in files:
        path = Path(name)
        digest.update(path.name.encode())
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def package_version() -> str:
    """The installed rollout-lab version, or ``"unknown"`` from a source tree."""
    try:
        return metadata.version("rollout-lab")
    except metadata.PackageNotFoundError:
        return "unknown"


def file_sha256(path: str | Path) -> str:
    """sha256 hex digest of a file's bytes (read in 1 MiB chunks)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def git_commit(directory: Path = Path(__file__).parent) -> str | None:
    """The git commit of the source tree holding ``directory`` (``+dirty``
    appended when tracked files changed), or None outside a git checkout."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(directory), *args], capture_output=True,
                                  text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return None
    return commit + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def environment() -> dict[str, Any]:
    """The environment fingerprint: Python, platform, versions of the
    packages that shape results (None when not installed), git commit."""
    versions: dict[str, str | None] = {}
    for name in FINGERPRINT_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {"python": platform.python_version(), "platform": platform.platform(),
            "packages": versions, "git_commit": git_commit()}


def scorer_version(source: str) -> str | None:
    """The reward file's own ``VERSION = "..."`` (a module-level literal), or None.

    Read from the syntax tree, so nothing is executed; a file whose source
    does not parse has no version (the rubric loader reports that error).
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "VERSION"):
            try:
                return str(ast.literal_eval(node.value))
            except ValueError:
                return None
    return None


def scorer_fields(source: str, success: str) -> dict[str, Any]:
    """The manifest's ``scorer``: sha256 of the reward file's source, its
    version, and what counts as solved (``SuccessRule.label``: two runs whose
    pass@1 counts different things are not compared)."""
    return {"source_sha256": hashlib.sha256(source.encode()).hexdigest(),
            "version": scorer_version(source), "success": success}


def prompt_fields(system_prompt: str | None, chat_template: str | None) -> dict[str, str]:
    """The manifest's ``prompt``: hashes of the system prompt and the chat template."""
    return {"system_prompt_sha256": sha256_json(system_prompt),
            "template_sha256": sha256_json(chat_template)}


def build_loop_manifest(*, kind: str, scenario, split: str, examples: list[dict],
                        chat_template: str | None, reward_source: str, reward_file: Path,
                        success: str, sampling: dict[str, Any], seed: int, model: dict[str, Any],
                        config: dict[str, Any]) -> dict[str, Any]:
    """The manifest of an eval (loop A) or select (loop B) run.

    Args:
        kind: ``"eval"`` or ``"select"``.
        scenario: the scenario (its system prompt is hashed).
        split: ``"eval"`` or ``"train"``: the split the examples come from.
        examples: the examples measured (hashed as canonical JSON).
        chat_template: the tokenizer's chat template, None for frozen completions.
        reward_source, reward_file: the rubric's source and its file.
        success: what counts as solved (``engine.rewards.success.SuccessRule.label``).
        sampling: temperature, max_new_tokens, n (samples per prompt).
        seed: the sampling seed.
        model: where the completions came from (model dir and weights hash,
            checkpoint, or a frozen completions file and its hash).
        config: the command's settings (hashed into ``files.config_sha256``).
    """
    return {
        "kind": kind,
        "scenario": scenario.name,
        "split": split,
        "dataset": {"sha256": sha256_json(examples), "size": len(examples)},
        "prompt": prompt_fields(scenario.system_prompt, chat_template),
        "scorer": scorer_fields(reward_source, success),
        "sampling": sampling,
        "model": model,
        "files": {"reward_file": str(reward_file), "reward_file_sha256": file_sha256(reward_file),
                  "config_sha256": sha256_json(config)},
        "seed": seed,
        "package_version": package_version(),
        "environment": environment(),
    }


def tool_fields(tools: list[dict[str, Any]] | None) -> dict[str, Any]:
    """The manifest's ``tools``: whether tools were offered, their names and schemas.

    Not a locked field: like the model, the tools are a treatment two runs
    of one task may differ in (``--no-tools`` is the control arm), so
    ``rlab compare`` pairs them and shows the difference."""
    if tools is None:
        return {"offered": False}
    return {"offered": True, "names": [t["function"]["name"] for t in tools], "schemas": tools,
            "schemas_sha256": sha256_json(tools)}


def build_manifest(*, scenario, config, chat_template: str | None, reward_source: str, success: str,
                   model_dir: Path, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The manifest of a run (a JSON-ready dict of hashes and settings).

    Args:
        scenario: the scenario object (its splits and system prompt are hashed).
        config: the RunConfig (seed and sampling settings are copied).
        chat_template: the tokenizer's chat template (the prompt template).
        reward_source: the rubric file's source at the start of the run.
        success: what counts as solved (``engine.rewards.success.SuccessRule.label``).
        model_dir: the policy's model directory (its weights are hashed).
        tools: the JSON schemas of the tools offered (a tool task), or None.
    """
    return {
        "scenario": scenario.name,
        "dataset": {
            "train_sha256": sha256_json(scenario.train_examples(config.seed)),
            "eval_sha256": sha256_json(scenario.eval_examples()),
            **getattr(scenario, "dataset_info", {}),  # a user task's files and held-out split
        },
        "prompt": prompt_fields(scenario.system_prompt, chat_template),
        "scorer": scorer_fields(reward_source, success),
        "sampling": {name: getattr(config, name) for name in SAMPLING_FIELDS},
        "model": {"path": str(model_dir), "weights_sha256": sha256_files(model_dir)},
        "package_version": package_version(),
        "seed": config.seed,
        "kind": "train",
        "files": {"config_sha256": sha256_json(config.model_dump(mode="json"))},
        "environment": environment(),
        **({"tools": tool_fields(tools)} if isinstance(scenario, ToolScenario) else {}),
    }
