"""An alert from another package (issue 58): one file and its entry point under ``rlab.alerts``,
and the engine's run, ``--alert`` and README's table take it without an edit to engine/alerts/."""

import os
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from rlab.engine.alerts import kinds
from rlab.store.reader import StoreReader

REPO = Path(__file__).resolve().parents[1]

#: The whole plugin: its settings, its check and its README sentence.
STEADY = '''
from pydantic import Field

from rlab.engine.alerts.base import AlertCheck, Shared


class SteadySettings(Shared):
    steady_floor: float = Field(2.0, description="A mean reward above this fires.")


class Steady(AlertCheck[SteadySettings]):
    kind, fires_when = "steady", "the mean reward is above `steady_floor`"

    def check(self, view):
        reward = view.finite("reward")
        if reward is None or reward <= self.settings.steady_floor:
            return None
        return self.alert(view, f"mean reward {reward:.2f} is above {self.settings.steady_floor:g}", value=reward)
'''


def _installed(folder: Path) -> dict[str, str]:
    """``folder`` holding the plugin as an installed package would (its module and a dist-info
    declaring the entry point); the environment of a process that has it on its path."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "steady_alert.py").write_text(STEADY)
    dist = folder / "steady_alert-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: steady-alert\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[rlab.alerts]\nsteady = steady_alert:Steady\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))}


@pytest.mark.e2e
def test_an_installed_alert_fires_in_a_headless_run_under_its_alert_setting_and_has_its_readme_row(tmp_path):
    env = _installed(tmp_path / "site")
    db = tmp_path / "a.db"
    run = subprocess.run([sys.executable, "-P", "-m", "rlab.engine.cli", "run", "--headless", "--db", str(db),
                          "--name", "steady", "--max-steps", "1", "--prompts-per-step", "4", "--eval-every", "100",
                          "--alert", "steady_floor=-1"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=240)
    assert run.returncode == 0, run.stderr
    assert "alert at step 1: steady: mean reward" in run.stderr
    reader = StoreReader(db)
    [event] = [e for e in reader.events(reader.run_by_name("steady")["id"])
               if e["kind"] == "alert" and e["payload"]["alert"] == "steady"]
    assert event["step"] == 1 and event["payload"]["message"].endswith("is above -1")

    table = subprocess.run([sys.executable, "-P", "-m", "rlab.engine.alerts.table"], env=env,
                           capture_output=True, text=True, timeout=60, check=True).stdout
    assert "| `steady` | `steady_floor` 2 | the mean reward is above `steady_floor` |" in table
    assert table.strip() not in (REPO / "README.md").read_text()  # README's check fails until the row is pasted


def _points(*values: str) -> list[EntryPoint]:
    return [EntryPoint(name, value, kinds.ENTRY_POINT_GROUP) for name, value in (v.split("=") for v in values)]


def test_a_plugin_that_is_no_alert_or_takes_a_kind_is_refused_and_one_that_fails_to_import_is_left_out(
        monkeypatch, capsys):
    monkeypatch.setattr(kinds, "entry_points", lambda group: _points("broken=no_such_module_for_rlab:Alert"))
    assert kinds._plugins(set()) == []
    assert "the alert 'broken' (no_such_module_for_rlab:Alert) could not be loaded" in capsys.readouterr().err

    monkeypatch.setattr(kinds, "entry_points", lambda group: _points("odd=pathlib:Path"))
    with pytest.raises(TypeError, match="must be an AlertCheck subclass whose kind is 'odd'"):
        kinds._plugins(set())

    monkeypatch.setattr(kinds, "entry_points", lambda group: _points("hack=rlab.engine.alerts.kinds.hack:Hack"))
    with pytest.raises(TypeError, match="names an alert kind already taken"):
        kinds._plugins({"hack"})
    assert kinds._plugins(set()) == [kinds.hack.Hack]  # not taken: it loads
