"""Build the shipped tiny policies: ``python -P -m rlab.engine.train.build_tiny [--scenario NAME | --all]``.

Warm-starts the tiny model of a built-in scenario for seed 0 exactly as
``engine.train.warm_start.ensure_tiny_model`` would on first use (the
scenario's warm-start target and budget), writes it as a Hugging Face model
directory (``config.json``, ``model.safetensors``, tokenizer files) into
``engine/policy/embedded/<scenario>/`` and records a manifest beside it:
the recipe (scenario, seed, the model's cache key, recipe version, target,
torch thread count, torch version), the supervised steps taken, probe and
held-out greedy pass@1, and the sha256 of every file
(``tests/test_embedded_policy.py`` checks them). Shipping every built-in
scenario's policy means a first run of any of them starts at once, with no
build (a few minutes to half an hour on one busy core).

The build is deterministic: torch is seeded and runs on ``--threads``
threads (default 1, so the result does not depend on the machine's core
count), and the data order comes from seeded ``random.Random``; the same
command on the same torch build reproduces the files byte for byte
(``--check`` rebuilds into a temporary folder and compares).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch

from rlab.engine.policy.tiny import MANIFEST_NAME, RECIPE_VERSION, embedded_dir, save_policy, scenario_model_key
from rlab.engine.rewards.rubric import load_rubric
from rlab.engine.train.warm_start import probe, warm_start
from rlab.scenarios import builtin_scenarios, get_scenario

#: The seed shipped policies are built for (a run's default seed).
SEED = 0


def file_digests(folder: Path) -> dict[str, str]:
    """sha256 (hex) of every file in ``folder`` except the manifest, by file name."""
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.iterdir()) if path.is_file() and path.name != MANIFEST_NAME}


def build(name: str, out: Path, threads: int) -> dict:
    """Warm-start scenario ``name``'s tiny policy, save it into ``out`` (replaced)
    and return the manifest written there.

    Raises:
        warm_start.WarmStartError: the probe target was not reached.
    """
    torch.set_num_threads(threads)
    scenario = get_scenario(name)
    result = warm_start(scenario, seed=SEED, target=scenario.warm_start_target, max_steps=scenario.warm_start_steps)
    held_out = probe(result.policy, scenario, scenario.eval_examples(), load_rubric(scenario.reward_file)).pass_at_1
    shutil.rmtree(out, ignore_errors=True)
    save_policy(result.policy, out)
    manifest = {
        "scenario": name, "seed": SEED, "key": scenario_model_key(scenario, SEED), "recipe_version": RECIPE_VERSION,
        "target": scenario.warm_start_target, "max_steps": scenario.warm_start_steps, "threads": threads,
        "torch": torch.__version__, "steps": result.steps, "probe_pass_at_1": result.probe_pass_at_1,
        "held_out_pass_at_1": held_out, "files": file_digests(out),
    }
    (out / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def check(name: str, out: Path, threads: int) -> list[str]:
    """Rebuild into a temporary folder; the files whose sha256 differ from ``out``'s manifest."""
    shipped = json.loads((out / MANIFEST_NAME).read_text())["files"]
    with tempfile.TemporaryDirectory() as tmp:
        rebuilt = build(name, Path(tmp) / "model", threads)["files"]
    return sorted(file for file in shipped.keys() | rebuilt.keys() if shipped.get(file) != rebuilt.get(file))


def main(argv: list[str] | None = None) -> int:
    """Build into ``--out`` (default: the scenario's shipped folder); ``--check`` compares instead."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    chosen = parser.add_mutually_exclusive_group()
    chosen.add_argument("--scenario", default="arithmetic", choices=builtin_scenarios(),
                        help="the scenario whose policy to build (default: %(default)s)")
    chosen.add_argument("--all", action="store_true", help="every built-in scenario, one after the other")
    parser.add_argument("--out", type=Path, help="output folder (default: engine/policy/embedded/<scenario>)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    parser.add_argument("--check", action="store_true",
                        help="rebuild into a temporary folder and compare its sha256s with the shipped manifest")
    args = parser.parse_args(argv)
    names = list(builtin_scenarios()) if args.all else [args.scenario]
    if args.out is not None and len(names) > 1:
        parser.error("--out names one folder: pass it with --scenario, not --all")
    failed = 0
    for name in names:
        out = args.out or embedded_dir(name)
        if args.check:
            differ = check(name, out, args.threads)
            failed += bool(differ)
            print(json.dumps({"scenario": name, "identical": not differ, "differ": differ}), flush=True)
        else:
            manifest = build(name, out, args.threads)
            print(json.dumps({k: v for k, v in manifest.items() if k != "files"}), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
