"""README's table of the alerts, made from the alerts themselves (a test holds README to it).

Print it with ``python -m rlab.engine.alerts.table`` and paste it under
README's "What counts as solved, and the alerts that guard a run".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from rlab.engine.alerts.base import AlertCheck, Shared
from rlab.engine.alerts.kinds import CHECKS
from rlab.engine.alerts.thresholds import AlertThresholds

HEADER = "| alert | thresholds (defaults) | fires when |\n| --- | --- | --- |"
#: The rows of the settings that are no one alert's.
COMMON = (("window", "steps in the plateau and trend windows and the early baselines"),
          ("pause_on", "the alerts that pause the run (comma list; empty: none)"))


def readme_table(checks: Sequence[type[AlertCheck[Any]]] = CHECKS,
                 thresholds: type[BaseModel] = AlertThresholds) -> str:
    """The table of ``checks`` (default: every alert) and the defaults of ``thresholds``:
    one row a setting every alert shares, then one row an alert."""
    def setting(name: str) -> str:  # `jump` 0.2, `pause_on` `collapse`
        default: Any = thresholds.model_fields[name].default
        return f"`{name}` " + (f"`{','.join(default)}`" if isinstance(default, list) else f"{default:g}")

    rows = [f"| every alert | {setting(name)} | {text} |" for name, text in COMMON]
    for check in checks:
        own = [name for name in check.settings_model.model_fields if name not in Shared.model_fields]
        rows.append(f"| `{check.kind}` | {', '.join(map(setting, own))} | {check.fires_when} |")
    return "\n".join([HEADER, *rows])


if __name__ == "__main__":
    print(readme_table())
