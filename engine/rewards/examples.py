"""The dataset examples behind stored groups, for re-scoring them.

Re-scoring a stored group (the reward editor's dry run, ``rlab reward``,
the group view's two-version ranking) needs the whole example (the answer a reward function
checks against). Run files since schema v5 keep it with the group; for older
files it is looked up by id in the run's scenario.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from rlab.scenarios import UnknownScenarioError, get_scenario


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
