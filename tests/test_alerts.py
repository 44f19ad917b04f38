"""Unit tests of the reward-hacking watch (tui/alerts.py)."""

import pydantic
import pytest

from rlab.tui.alerts import AlertThresholds, AlertWatch, GroupStats, distinct_n, spearman


def _group(step, gid, rewards, completions=None, judge=None):
    completions = completions or [f"answer {i} for {gid}" for i in range(len(rewards))]
    return GroupStats(step, gid, list(rewards), completions, list(judge or []))


def test_reward_jump_fires_once_after_plateau():
    watch = AlertWatch(AlertThresholds(window=5))
    fired = []
    for step, reward in enumerate([0.3] * 5 + [0.8, 0.85, 0.9]):
        fired += watch.observe(step, {"reward": reward}, [])
    assert [(a.kind, a.step) for a in fired] == [("reward_jump", 5)]
    assert fired[0].value == pytest.approx(0.5)


def test_no_jump_without_plateau():
    watch = AlertWatch(AlertThresholds(window=4))
    fired = []
    for step, reward in enumerate([0.1, 0.4, 0.2, 0.5, 0.9]):
        fired += watch.observe(step, {"reward": reward}, [])
    assert fired == []


def test_perfect_share_names_the_all_perfect_groups():
    watch = AlertWatch(AlertThresholds(perfect_share=0.75))
    groups = [_group(3, 10, [1, 1, 1, 1]), _group(3, 11, [1, 1, 1, 0])]
    fired = watch.observe(3, {}, groups)
    assert [a.kind for a in fired] == ["perfect_share"]
    assert fired[0].group_ids == (10,)
    assert fired[0].value == pytest.approx(7 / 8)
    # still true on the next step: edge-triggered, no repeat
    assert watch.observe(4, {}, [_group(4, 12, [1, 1, 1, 1])]) == []


def test_length_drift_against_early_baseline():
    watch = AlertWatch(AlertThresholds(window=3, length_drift=0.5))
    fired = []
    for step, length in enumerate([10, 10, 10, 12, 16]):
        fired += watch.observe(step, {"completions/mean_length": length}, [])
    assert [(a.kind, a.step) for a in fired] == [("length_drift", 4)]


def test_diversity_drop_when_groups_collapse():
    watch = AlertWatch(AlertThresholds(window=2, diversity_drop=0.5))
    varied = ["a b c", "d e f", "g h i", "j k l"]
    same = ["a b c"] * 4
    fired = []
    for step, texts in enumerate([varied, varied, varied, same]):
        fired += watch.observe(step, {}, [_group(step, 100 + step, [0, 1, 0, 1], texts)])
    assert [(a.kind, a.step, a.group_ids) for a in fired] == [("diversity_drop", 3, (103,))]


def test_judge_disagreement_needs_reversed_rankings():
    watch = AlertWatch()
    agree = _group(1, 1, [0, 0.5, 1], judge=[0.1, 0.5, 0.9])
    reverse = _group(1, 2, [0, 0.5, 1], judge=[0.9, 0.5, 0.1])
    unjudged = _group(1, 3, [0, 0.5, 1])
    fired = watch.observe(1, {}, [agree, reverse, unjudged])
    assert [(a.kind, a.group_ids) for a in fired] == [("judge_disagreement", (2,))]


def test_steps_out_of_order_are_refused():
    watch = AlertWatch()
    watch.observe(5, {}, [])
    with pytest.raises(ValueError, match="steps must increase"):
        watch.observe(5, {}, [])


def test_thresholds_reject_unknown_keys():
    with pytest.raises(pydantic.ValidationError, match="jupm"):
        AlertThresholds.model_validate({"jupm": 0.3})


def test_distinct_n_and_spearman():
    assert distinct_n(["7"] * 8, 2) == pytest.approx(1 / 8)
    assert distinct_n(["a b c", "a b d"], 2) == pytest.approx(3 / 4)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 1, 1], [1, 2, 3]) is None
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.9486833)


# Recorded from a reward_hacking run (default recipe, seed 0): completions/mean_length
# (tokens, EOS included) and the share of hedged completions, steps 1..30.
HACK_LENGTHS = [3.86, 4.25, 3.84, 4.24, 4.28, 4.21, 4.53, 4.54, 4.34, 4.87, 5.37, 5.83, 5.93, 6.69, 7.46,
                7.71, 8.42, 8.5, 9.45, 9.65, 9.74, 10.27, 9.97, 10.36, 10.46, 10.87, 10.8, 10.87, 11.14, 11.48]
HACK_SHARE = [0.05, 0.09, 0.07, 0.1, 0.09, 0.13, 0.14, 0.15, 0.12, 0.22, 0.25, 0.32, 0.34, 0.42, 0.52,
              0.52, 0.61, 0.64, 0.73, 0.78, 0.77, 0.82, 0.8, 0.86, 0.86, 0.91, 0.89, 0.9, 0.92, 0.96]


def test_the_reward_hack_raises_length_drift_within_a_few_steps_naming_the_step_and_its_groups():
    watch = AlertWatch()
    fired = []
    for step, (length, share) in enumerate(zip(HACK_LENGTHS, HACK_SHARE), start=1):
        hedged = round(8 * share)
        groups = [GroupStats(step, 100 * step + g, [1.0] * 8,
                             ["57 67 47"] * (hedged if g == 0 else 0) + ["57"] * (8 - (hedged if g == 0 else 0)))
                  for g in range(4)]
        fired += [a for a in watch.observe(step, {"completions/mean_length": length}, groups)
                  if a.kind == "length_drift"]
    took_hold = next(s for s, share in enumerate(HACK_SHARE, start=1) if share >= 0.25)  # 5x the warm start
    [alert] = fired
    assert took_hold <= alert.step <= took_hold + 3 and alert.value > 0.5
    assert alert.group_ids[0] == 100 * alert.step  # enter opens the group with the hedged completions
