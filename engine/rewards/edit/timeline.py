"""Which reward version each step of a run trains with, so a resume replays them.

A run's reward edits are ``reward_edit`` events: version v takes over at
step s (the step boundary it was applied at). A resume re-runs the steps
after its checkpoint; each of them must train with the version it first ran
with, or the resumed run is not the run it continues. A version recorded
for a stopped or failed run (``rlab reward`` on a run that is not running:
the way out of a version that made it diverge) is an edit at the step the
next resume starts from. The plan follows the events in order: an edit at
step s replaces whatever the plan said from s on; a replayed edit (one a
resume re-applied, ``replayed`` in its payload) changes nothing. A fork
(``engine.run.fork``) starts at step k + 1 on the version its ``fork`` event
(at step k) names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def reward_plan(events: Iterable[Mapping[str, Any]]) -> list[tuple[int, int]]:
    """The run's reward versions over steps: ``[(first step, version), ...]``
    in step order, version 1 from step 1 until the first edit.

    Args:
        events: the run's events in write order (``kind``, ``step``, ``payload``);
            only ``reward_edit`` ones count.
    """
    plan = [(1, 1)]
    for event in events:
        payload = event.get("payload") or {}
        if event.get("kind") == "fork":
            plan = [(1, int(payload["reward_version"]))]
            continue
        if event.get("kind") != "reward_edit" or payload.get("replayed") or event.get("step") is None:
            continue
        step, version = int(event["step"]), int(payload["version"])
        plan = [entry for entry in plan if entry[0] < step] + [(step, version)]
    return plan


def resume_versions(plan: list[tuple[int, int]], checkpoint_step: int) -> tuple[int, list[tuple[int, int]]]:
    """For a resume after step ``checkpoint_step`` (0: none): the version in force
    at its first step, and the ``(step, version)`` edits to replay later."""
    in_force = max((entry for entry in plan if entry[0] <= checkpoint_step + 1), key=lambda e: e[0])[1]
    return in_force, [entry for entry in plan if entry[0] > checkpoint_step + 1]
