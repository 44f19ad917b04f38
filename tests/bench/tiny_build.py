"""The tiny policy's build of a tool task, from an empty cache, timed (issue 57, target <= 5 minutes).

    python tests/bench/tiny_build.py                 # shop_agent, then the three-tool task
    python tests/bench/tiny_build.py --tasks shop    # one of them

Each build is what a first ``rlab run --task ...`` pays before its first
step: ``ensure_tiny_model`` in a fresh process with ``RLAB_CACHE_DIR`` in a
new temporary folder, the run's thread rule (``engine.policy.device``). The
tasks: examples/tasks/shop_agent (two tools), and the same task with a third
tool whose documented schemas bring the tools to about 1,000 characters of
JSON (``stock(item, store)``; written into a temporary folder), as a user's
three-tool task has. Prints one JSON object: the machine, and per task the
schemas' characters, the build's steps, wall seconds and its tool-use report
line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from rlab.engine.policy.device import describe_machine  # noqa: E402

SHOP = ROOT / "examples" / "tasks" / "shop_agent"
THIRD_TOOL = '''

def stock(item: str, store: str = "central") -> int:
    """How many of an item one of the shop's stores has on its shelves right now, counted at
    the last stocktaking; an item the store does not carry counts 0.

    Args:
        item: the item's name, as the price list spells it, e.g. "lamp" or "kettle"
        store: which store to look in: "central" (the main store), "harbour" or "station"
    """
    return {"central": 12, "harbour": 4, "station": 0}.get(store, 0) if item in PRICES else 0
'''
BUILD = """
import json, sys, time
from rlab.engine.policy.device import set_cpu_threads
from rlab.engine.train.warm_start import ensure_tiny_model, tool_schemas
from rlab.scenarios import load_scenario
task = load_scenario(None, sys.argv[1])
set_cpu_threads(None, tiny_policy=True, building=True)
started = time.monotonic()
ensure_tiny_model(task, seed=0)
print(json.dumps({"seconds": round(time.monotonic() - started, 1), "steps": task.warm_start_steps,
                  "schema_chars": len(json.dumps(tool_schemas(task)))}))
"""


def three_tools(folder: Path) -> Path:
    """The shop agent with a third tool, in ``folder``."""
    task = folder / "shop_three_tools"
    shutil.copytree(SHOP, task)
    (task / "tools.py").write_text((SHOP / "tools.py").read_text() + THIRD_TOOL)
    toml = (task / "task.toml").read_text().replace('name = "shop_agent"', 'name = "shop_three_tools"')
    (task / "task.toml").write_text(toml)
    return task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="shop,three_tools", help="comma-separated: shop, three_tools")
    args = parser.parse_args()
    out: dict = {"date": time.strftime("%Y-%m-%d"), "machine": describe_machine(), "tasks": {}}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {"shop": SHOP, "three_tools": three_tools(Path(tmp))}
        for name in args.tasks.split(","):
            with tempfile.TemporaryDirectory() as cache:
                started = time.monotonic()
                done = subprocess.run([sys.executable, "-P", "-c", BUILD, str(paths[name])], capture_output=True,
                                      text=True, env=os.environ | {"RLAB_CACHE_DIR": cache})
                wall = time.monotonic() - started
            if done.returncode != 0:
                sys.exit(f"{name}: the build failed:\n{done.stderr[-3000:]}")
            report = [line for line in done.stderr.splitlines() if "train examples, greedy" in line]
            out["tasks"][name] = json.loads(done.stdout.strip().splitlines()[-1]) | {
                "wall_s": round(wall, 1), "tool_report": report[-1] if report else None}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
