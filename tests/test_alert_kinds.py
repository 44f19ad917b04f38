"""An alert in one room (issue 58, item 4): each alert is one module of engine/alerts/kinds/,
and the thresholds, the watch, the recorder's reward holes and README's table read them."""

from pathlib import Path

import pydantic
import pytest
from pydantic import Field

from rlab.engine.alerts import ALERT_KINDS, CHECKS, REWARD_HOLES, AlertCheck, AlertThresholds, AlertWatch, Shared
from rlab.engine.alerts.base import Baseline, StepView
from rlab.engine.alerts.table import readme_table
from rlab.engine.alerts.thresholds import _flat

REPO = Path(__file__).resolve().parents[1]


def test_readme_s_alerts_table_is_the_one_the_alerts_make():
    table = readme_table()
    assert table in (REPO / "README.md").read_text(), (
        "README's alerts table and engine/alerts/kinds/ disagree; paste `python -m rlab.engine.alerts.table`:\n"
        + table)


def test_each_alert_is_a_module_named_as_its_kind_and_every_setting_is_a_threshold():
    modules = sorted(p.stem for p in (REPO / "engine/alerts/kinds").glob("*.py") if p.stem != "__init__")
    assert list(ALERT_KINDS) == modules == [check.kind for check in CHECKS]
    own = {name for check in CHECKS for name in check.settings_model.model_fields}
    assert set(AlertThresholds.model_fields) == own | {"pause_on"}
    assert set(REWARD_HOLES) == {"hack", "tool_loop"}


def test_two_alerts_may_not_name_one_setting():
    class Settings(Shared):
        jump: float = Field(1.0)

    class Twin(AlertCheck[Settings]):
        kind, settings_model, fires_when = "twin", Settings, "never"

        def check(self, view):
            return None

    with pytest.raises(TypeError, match="the twin alert's setting 'jump' is named as another setting"):
        _flat((*CHECKS, Twin))


class _FloorSettings(Shared):
    steady_floor: float = Field(-1.0, description="A mean reward above this fires.")


class _Steady(AlertCheck[_FloorSettings]):
    """What a new module of engine/alerts/kinds/ would hold: settings, state, check, README sentence."""

    kind, settings_model, fires_when = "steady", _FloorSettings, "the mean reward is above `steady_floor`"

    def check(self, view):
        reward = view.finite("reward")
        if reward is None or reward <= self.settings.steady_floor:
            return None
        return self.alert(view, f"mean reward {reward:.2f} is above {self.settings.steady_floor:g}", value=reward)


def test_a_new_alert_s_class_is_all_the_thresholds_the_watch_and_the_readme_table_need():
    checks = (*CHECKS, _Steady)
    thresholds = _flat(checks)
    watch = AlertWatch(thresholds.model_validate({"steady_floor": "0.5", "pause_on": "steady"}), checks=checks)
    [alert] = watch.observe(1, {"reward": 0.75}, [])
    assert (alert.kind, alert.message, alert.action) == ("steady", "mean reward 0.75 is above 0.5", "pause")
    assert watch.observe(2, {"reward": 0.75}, []) == []  # edge-triggered as every alert is
    with pytest.raises(pydantic.ValidationError, match="steady_flor"):
        thresholds.model_validate({"steady_flor": 1})
    table = readme_table(checks, thresholds)
    assert table.endswith("| `steady` | `steady_floor` -1 | the mean reward is above `steady_floor` |")
    assert table not in (REPO / "README.md").read_text()  # README's check fails until the row is pasted


def test_retuned_alerts_keep_their_history_cut_to_the_new_window():
    """rlab set RUN alert.window=3: each alert keeps the newest steps of its windows."""
    watch = AlertWatch(AlertThresholds(window=5))
    for step, reward in enumerate([0.9, 0.1, 0.3, 0.3, 0.3]):
        assert watch.observe(step, {"reward": reward}, []) == []  # no plateau over 5 steps
    watch.retune(AlertThresholds(window=3, jump=0.3))
    [alert] = watch.observe(5, {"reward": 0.7}, [])
    assert alert.kind == "reward_jump" and alert.message == "mean reward jumped 0.30 -> 0.70 after a 3-step plateau"


def test_an_alert_s_settings_are_its_generic_parameter_and_its_windows_follow_a_retune():
    class Pair(AlertCheck[_FloorSettings]):
        kind, fires_when = "pair", "never"

        def begin(self):
            self.trend_ = self.trend("reward", "success_rate")

        def check(self, view):
            return None

    assert Pair.settings_model is _FloorSettings
    pair = Pair(_flat((*CHECKS, Pair))(window=4))
    rises = [pair.trend_.rises(StepView(step, {"reward": r, "success_rate": 0.5}, [])) for step, r in
             enumerate([0.0, 0.2, float("nan"), 0.4, 0.6])]
    assert rises[:4] == [None] * 4 and rises[4] == pytest.approx((0.4, 0.0))  # a nan step is not taken
    pair.retune(_flat((*CHECKS, Pair))(window=2))
    assert list(pair.trend_.steps) == [(0.4, 0.5), (0.6, 0.5)]


def test_a_baseline_is_the_mean_of_a_metric_s_first_window_steps():
    early = Baseline()
    seen = [early.against(StepView(step, {"x": x}, []), "x", 2) for step, x in enumerate([1.0, None, 3.0, 5.0])]
    assert seen == [None, None, None, (5.0, 2.0)]
