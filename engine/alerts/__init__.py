"""The run's watch: alerts computed from step metrics and group stats, by the engine.

The engine feeds an :class:`AlertWatch` every step (through
``engine.recorder``), stores each alert as an ``alert`` event (so a headless
run on a GPU box has them, and ``rlab watch`` / ``rlab runs`` show them),
prints it, and pauses the run on the kinds named in ``pause_on``. The
package is pure Python, so the TUI can replay stored steps under other
thresholds (``rlab watch --alert``).

Each alert is one module of ``kinds/`` ("watch your rollouts, don't blindly
trust the reward function"): its settings, state, check and the sentence of
README's table (:func:`~rlab.engine.alerts.table.readme_table`, which a test
holds README to). What each one means is its module's docstring. The rest:

- ``base``: :class:`Alert` (what an alert raises), :class:`AlertCheck` (what
  an alert is), :class:`StepView` (what it reads);
- ``inputs``: :class:`GroupStats` (what the watch reads of a group),
  :func:`distinct_n`, :func:`reward_scale`;
- ``thresholds``: :class:`AlertThresholds`, every alert's settings in one
  flat model (``--alert NAME=VALUE``), and ``pause_on``;
- ``watch``: :class:`AlertWatch`, which raises an alert once as it starts.
"""

from rlab.engine.alerts.base import Alert, AlertCheck, Shared, StepView
from rlab.engine.alerts.inputs import GroupStats, distinct_n, reward_scale
from rlab.engine.alerts.kinds import CHECKS
from rlab.engine.alerts.thresholds import ALERT_KINDS, REWARD_HOLES, AlertThresholds
from rlab.engine.alerts.watch import AlertWatch

__all__ = ["ALERT_KINDS", "CHECKS", "REWARD_HOLES", "Alert", "AlertCheck", "AlertThresholds", "AlertWatch",
           "GroupStats", "Shared", "StepView", "distinct_n", "reward_scale"]
