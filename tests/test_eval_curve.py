"""The headless summary's eval_curve (every held-out eval against seconds of training) and the
learning-rate horizon those seconds are trained under."""

from __future__ import annotations

from rlab.engine.run.config import RunConfig
from rlab.engine.step import budget_fraction, run


def test_eval_curve_has_every_held_out_eval_from_zero(tmp_path, raw_tiny_model_dir):
    summary = run(RunConfig(model=raw_tiny_model_dir, db=tmp_path / "c.db", max_steps=5, eval_every=2,
                            eval_size=4, prompts_per_step=2, group_size=2, checkpoint_every=100))
    curve = summary["eval_curve"]
    assert len(curve) == 4  # initial, steps 2 and 4, final after step 5
    assert curve[0] == [0.0, summary["eval_pass_at_1_initial"]]
    assert curve[-1][1] == summary["eval_pass_at_1_final"]
    seconds = [t for t, _ in curve]
    assert seconds == sorted(seconds) and 0 < seconds[-1] <= summary["seconds"]
    assert all(0.0 <= p <= 1.0 for _, p in curve)


def test_the_learning_rate_anneals_over_the_budget_or_the_decay_horizon_whichever_ends_first():
    """Linear decay over max_steps/max_seconds or lr_decay_steps (the shorter), then held."""
    assert budget_fraction(RunConfig(max_steps=100, lr_decay_steps=1000), 51, 0.0) == 0.5
    assert budget_fraction(RunConfig(max_seconds=10.0, lr_decay_steps=1000), 1, 5.0) == 0.5
    open_ended = RunConfig(lr_decay_steps=200)
    assert budget_fraction(open_ended, 101, 1e6) == 0.5  # seconds do not count without a budget
    assert budget_fraction(open_ended, 5000, 0.0) == 1.0
    assert budget_fraction(RunConfig(max_seconds=180.0, lr_decay_steps=10), 6, 1.0) == 0.5  # the horizon ends first


def test_rlab_set_eval_every_moves_the_next_held_out_evals(tmp_path, raw_tiny_model_dir):
    """`rlab set RUN eval_every=2` on a run started with 100: the loop evals at steps 2 and 4.
    It read the eval_every the run started with, so it evaluated at neither, and the curve
    lost its final point too (the final eval reads the changed setting: 4 is a multiple of 2)."""
    from rlab.engine.run.start import start
    from rlab.engine.step import train
    from rlab.store.control import send_command

    config = RunConfig(model=raw_tiny_model_dir, db=tmp_path / "s.db", max_steps=4, eval_every=100, eval_size=4,
                       prompts_per_step=2, group_size=2, checkpoint_every=100)
    session = start(config)
    try:
        send_command(config.db, session.run_id, "set_settings", {"changes": {"eval_every": 2}})
        summary = train(session)  # the change is read at step 1's boundary
    finally:
        session.close()
    assert len(summary["eval_curve"]) == 3  # initial, steps 2 and 4
