"""Stored groups as a re-scoring takes them: their trajectories, with the examples behind them.

Re-scoring a stored group (the reward editor's dry run, ``rlab reward``,
the group view's two-version ranking) needs what the run's rubric saw: the
whole example (the answer a reward function checks against) and, for a
multi-step trajectory, the transcript and the environment's per-turn
rewards (which ``env_reward`` reads). Run files since schema v5 keep the
example with the group; for older files it is looked up by id in the run's
scenario.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from rlab.engine.rewards.helpers import ENV_REWARDS_KEY
from rlab.scenarios import UnknownScenarioError, get_scenario
from rlab.store.errors import RunNotFoundError
from rlab.store.reader import StoreReader
from rlab.store.rows import GroupRow


class ExampleIndex:
    """``example_id -> example`` per scenario, built once per scenario (lazily).

    Thread-safe; an index holds every train and held-out example of a
    scenario (arithmetic: 8,100 small dicts).
    """

    def __init__(self) -> None:
        self._by_scenario: dict[str, dict[str, dict]] = {}
        self._lock = threading.Lock()

    def example(self, scenario: str, group: Mapping[str, Any]) -> dict:
        """The group's stored example, else the scenario's example with the
        group's ``example_id``; ``{"id", "prompt"}`` when neither is there
        (then reward functions that need more fields report an error in
        their details)."""
        if group.get("example"):
            return group["example"]
        example_id, prompt = group["example_id"], group["prompt"]
        with self._lock:
            if scenario not in self._by_scenario:
                self._by_scenario[scenario] = _index(scenario)
            found = self._by_scenario[scenario].get(str(example_id))
        return found if found is not None else {"id": example_id, "prompt": prompt}


def _index(scenario: str) -> dict[str, dict]:
    try:
        sc = get_scenario(scenario)
    except UnknownScenarioError:
        return {}
    # Ids do not depend on the seed (it only shuffles), so seed 0 finds them all.
    return {str(ex["id"]): ex for ex in [*sc.train_examples(0), *sc.eval_examples()]}


def stored_group(reader: StoreReader, group: GroupRow, example: dict[str, Any]) -> dict[str, Any]:
    """A stored group as a re-scoring takes it (``engine.rewards.edit.check``):
    ``{"trajectories": [{"example", "completion", "reward"}]}``, with what the
    run's rubric saw (``engine.rewards.edit.gate.check_samples``): a multi-step
    trajectory's completion is its whole transcript, and its example carries
    its turns' stored environment rewards, so ``env_reward`` scores what it
    scored in the run. Runs stored before schema v9 (or imported) have no
    such rewards: there ``env_reward`` gives 0.0 with no verdict.
    """
    env = reader.env_rewards(group["id"])  # only multi-step trajectories have turns
    return {"trajectories": [
        {"example": _with_env_rewards(example, env[t["id"]]), "completion": t["messages"], "reward": t["reward"]}
        if t["id"] in env else {"example": example, "completion": t["completion"], "reward": t["reward"]}
        for t in group["trajectories"]]}


def _with_env_rewards(example: dict[str, Any], rewards: list[float | None]) -> dict[str, Any]:
    if any(r is None for r in rewards):
        return example
    return {**example, ENV_REWARDS_KEY: rewards}


def recent_groups(reader: StoreReader, run_id: int, k: int,
                  examples: ExampleIndex | None = None) -> list[dict[str, Any]]:
    """The run's last ``k`` groups, newest first, as ``check_edit`` takes them
    (:func:`stored_group`), each example looked up in ``examples`` (a new
    index when None; the TUI passes its own, built once).

    Raises:
        RunNotFoundError: no run ``run_id`` in the file.
    """
    run = reader.run(run_id)
    if run is None:
        raise RunNotFoundError(f"no run with id {run_id} in {reader.path}")
    examples = examples or ExampleIndex()
    out: list[dict[str, Any]] = []
    for step in reversed(reader.steps(run_id)):
        for light in reversed(reader.groups_of_step(run_id, step)):
            group = reader.group(light["id"])
            if group is None:
                continue
            out.append(stored_group(reader, group, examples.example(run["scenario"], group)))
            if len(out) >= k:
                return out
    return out
