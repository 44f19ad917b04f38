"""Issue 46, 5: a TUI view is its module plus one registry entry. A view
registered here, from the test, gets its key on the inspection screens, a
footer label, a help line and the cursor's data, with no file of the app edited."""

from __future__ import annotations

import pytest
from textual.widgets import Markdown, Static

from fixtures.agentdb import build_agent_db
from rlab.tui import view as views
from rlab.tui.app import RolloutLabApp
from rlab.tui.view import NavScreen, View, ViewEntry, register_view
from test_tui_snapshots import SIZE, settled


class RewardsOnlyScreen(NavScreen):
    """The test's view: the rewards of the cursor's group, one line."""

    VIEW_NAME = "rewards_only"

    def compose(self):
        yield Static(id="rewards-only")

    def show_view(self, view: View) -> None:
        rewards = [t["reward"] for t in (view.group or {}).get("trajectories", [])]
        self.query_one("#rewards-only", Static).update(f"rewards: {rewards}")


@pytest.fixture
def registered():
    register_view(ViewEntry("rewards_only", "z", "Rewards", "rewards only: the group's rewards on one line",
                            RewardsOnlyScreen))
    yield
    del views.VIEWS["rewards_only"]  # the registry as it was, for the other tests


async def test_a_registered_view_opens_on_its_key_and_has_a_help_line(registered, tmp_path):
    path = tmp_path / "agent.db"
    run_id = build_agent_db(path)
    app = RolloutLabApp(path, run_id=run_id)
    async with app.run_test(size=SIZE) as pilot:
        await settled()(pilot)
        active = app.screen.active_bindings
        assert active["z"].binding.description == "Rewards" and active["z"].enabled
        await settled("z")(pilot)
        assert isinstance(app.screen, RewardsOnlyScreen)
        shown = str(app.screen.query_one("#rewards-only", Static).render())
        assert shown == f"rewards: {[t['reward'] for t in app.view.group['trajectories']]}"
        await settled("escape", "question_mark")(pilot)
        help_text = app.screen.query_one(Markdown).source
        assert "z" not in app.screen.active_bindings  # the app binds it (tui.view.late_view_bindings): not here
        assert "| `z` | rewards only: the group's rewards on one line |" in help_text
        assert help_text.index("`b` `w`") < help_text.index("`g`") < help_text.index("`z`") < help_text.index("`s`")


def test_a_view_key_that_is_taken_is_refused(registered):
    with pytest.raises(ValueError, match="key 'g'.*taken"):
        register_view(ViewEntry("other", "g", "Other", "another", RewardsOnlyScreen))
    with pytest.raises(ValueError, match="key 'left_square_bracket'"):
        register_view(ViewEntry("steps", "left_square_bracket", "Steps", "steps", RewardsOnlyScreen))
