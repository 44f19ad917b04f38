"""engine.rewards.edit.compare: the dry run's old-versus-new figures, by hand."""

from __future__ import annotations

import pytest

from rlab.engine.rewards.edit.compare import best_changed, compare_groups, ranking_changed


def test_ranking_change_is_any_pair_comparing_differently():
    assert not ranking_changed([0, 1, 2], [10, 20, 30])  # shift and scale keep the ranking
    assert ranking_changed([0, 1, 2], [0, 2, 1])  # a swap
    assert ranking_changed([1, 1, 0], [1, 0.5, 0])  # a tie broken
    assert ranking_changed([1, 0.5, 0], [1, 1, 0])  # a tie made
    assert not ranking_changed([1, 1, 0], [2, 2, 1])


def test_best_changed_compares_the_set_of_top_trajectories():
    assert not best_changed([1, 0, 0], [1, 0.5, 0])
    assert best_changed([1, 0, 0], [0, 1, 0])
    assert best_changed([1, 1, 0], [1, 0, 0])  # a co-winner dropped
    assert not best_changed([], [])


def test_report_means_histograms_and_taus():
    report = compare_groups([[0.0, 1.0], [1.0, 1.0]], [[0.0, 0.5], [1.0, 0.0]], bins=2)
    assert report.old_mean == pytest.approx(0.75) and report.new_mean == pytest.approx(0.375)
    assert report.bin_edges == [0.0, 0.5, 1.0]
    assert report.old_counts == [1, 3]  # numpy's last bin is closed: 1.0 falls in it
    assert report.new_counts == [2, 2]
    assert report.groups[0].tau == pytest.approx(1.0)
    assert report.groups[1].tau is None  # old rewards tied
    assert report.mean_tau == pytest.approx(1.0)
    assert report.groups_ranking_changed == 1


def test_equal_rewards_get_a_unit_wide_histogram():
    report = compare_groups([[2.0, 2.0]], [[2.0, 2.0]], bins=4)
    assert report.bin_edges[0] == 1.5 and report.bin_edges[-1] == 2.5
    assert sum(report.old_counts) == 2


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="same groups"):
        compare_groups([[1.0]], [])
    with pytest.raises(ValueError, match="group 0: 1 old rewards but 2 new"):
        compare_groups([[1.0]], [[1.0, 2.0]])
    with pytest.raises(ValueError, match="bins"):
        compare_groups([[1.0]], [[1.0]], bins=0)
