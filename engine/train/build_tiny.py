"""Build the shipped tiny policy: ``python -P -m rlab.engine.train.build_tiny``.

Warm-starts the tiny model on the default scenario (arithmetic, seed 0) with
the recipe in :mod:`rlab.engine.train.warm_start`, writes it as a Hugging Face
model directory (``config.json``, ``model.safetensors``, tokenizer files)
into ``engine/policy/embedded/`` and records a manifest beside it:
the recipe (scenario, seed, recipe version, target, torch thread count,
torch version), the supervised steps taken, probe and held-out greedy pass@1,
and the sha256 of every file (``tests/test_embedded_policy.py`` checks them).

The build is deterministic: torch is seeded and runs on ``--threads``
threads (default 1, so the result does not depend on the machine's core
count), and the data order comes from seeded ``random.Random``; the same
command on the same torch build reproduces the files byte for byte
(``--check`` rebuilds into a temporary folder and compares). It takes a few
minutes on one CPU core.
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

from rlab.engine.policy.tiny import EMBEDDED_DIR, MANIFEST_NAME, RECIPE_VERSION, save_policy
from rlab.engine.rewards.rubric import load_rubric
from rlab.engine.train.warm_start import probe_pass_at_1, warm_start
from rlab.scenarios import get_scenario

SCENARIO = "arithmetic"
SEED = 0
TARGET = 0.4
MAX_STEPS = 4000


def file_digests(folder: Path) -> dict[str, str]:
    """sha256 (hex) of every file in ``folder`` except the manifest, by file name."""
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.iterdir()) if path.is_file() and path.name != MANIFEST_NAME}


def build(out: Path, threads: int) -> dict:
    """Warm-start, save into ``out`` (replaced) and return the manifest written there.

    Raises:
        warm_start.WarmStartError: the probe target was not reached.
    """
    torch.set_num_threads(threads)
    scenario = get_scenario(SCENARIO)
    result = warm_start(scenario, seed=SEED, target=TARGET, max_steps=MAX_STEPS)
    held_out = probe_pass_at_1(result.policy, scenario, scenario.eval_examples(), load_rubric(scenario.reward_file))
    shutil.rmtree(out, ignore_errors=True)
    save_policy(result.policy, out)
    manifest = {
        "scenario": SCENARIO, "seed": SEED, "recipe_version": RECIPE_VERSION, "target": TARGET,
        "max_steps": MAX_STEPS, "threads": threads, "torch": torch.__version__,
        "steps": result.steps, "probe_pass_at_1": result.probe_pass_at_1,
        "held_out_pass_at_1": held_out, "files": file_digests(out),
    }
    (out / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    """Build into ``--out`` (default: the shipped folder); ``--check`` compares instead."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=EMBEDDED_DIR, help="output folder (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s)")
    parser.add_argument("--check", action="store_true",
                        help="rebuild into a temporary folder and compare its sha256s with --out's manifest")
    args = parser.parse_args(argv)
    if not args.check:
        manifest = build(args.out, args.threads)
        print(json.dumps({k: v for k, v in manifest.items() if k != "files"}))
        return 0
    shipped = json.loads((args.out / MANIFEST_NAME).read_text())["files"]
    with tempfile.TemporaryDirectory() as tmp:
        rebuilt = build(Path(tmp) / "model", args.threads)["files"]
    differ = sorted(name for name in shipped.keys() | rebuilt.keys() if shipped.get(name) != rebuilt.get(name))
    print(json.dumps({"identical": not differ, "differ": differ}))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
