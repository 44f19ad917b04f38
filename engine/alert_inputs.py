"""Where the watch's inputs were: modules written before the alerts got their room
(``engine.alerts``) import them from here; new code imports ``rlab.engine.alerts``."""

from rlab.engine.alerts.inputs import GroupStats, distinct_n, reward_scale

__all__ = ["GroupStats", "distinct_n", "reward_scale"]
