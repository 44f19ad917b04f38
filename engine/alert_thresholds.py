"""Where ``AlertThresholds`` was: modules written before the alerts got their room
(``engine.alerts``) import it from here; new code imports ``rlab.engine.alerts``."""

from rlab.engine.alerts.thresholds import ALERT_KINDS, AlertThresholds

__all__ = ["ALERT_KINDS", "AlertThresholds"]
