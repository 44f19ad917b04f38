"""TRL-named step metrics from stored records (store.stepstats), shared by the
engine's own runs and the importers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlab.engine.recorder import Recorder, RunRef, StepRecord
from rlab.engine.rewards.success import SuccessRule
from rlab.store.records import GroupRecord, TrajectoryRecord
from rlab.store.stepstats import grpo_advantages, step_stats
from rlab.store.writer import StoreWriter


def _t(reward, components, tokens, truncated=False, prompt_tokens=5):
    return TrajectoryRecord(index=0, messages=[], completion="x", reward=reward,
                            components=components, details={}, advantage=0.0,
                            prompt_tokens=prompt_tokens, completion_tokens=tokens,
                            truncated=truncated)


GROUPS = [
    GroupRecord(index=0, example_id="a", prompt="p", trajectories=[
        _t(1.0, {"correct": 1.0, "short": 1.0}, 4), _t(0.0, {"correct": 0.0, "short": math.nan}, 8,
                                                       truncated=True)]),
    GroupRecord(index=1, example_id="b", prompt="q", trajectories=[
        _t(1.0, {"correct": 1.0, "short": 0.0}, 2), _t(1.0, {"correct": 1.0, "short": 0.0}, 6)]),
]


def test_step_stats_follow_trl_names_and_formulas():
    stats = step_stats(GROUPS)
    assert stats["reward"] == 0.75
    assert stats["reward_std"] == pytest.approx(math.sqrt(0.5) / 2)
    assert stats["frac_reward_zero_std"] == 0.5
    assert stats["rewards/correct/mean"] == 0.75
    assert stats["rewards/correct/std"] == pytest.approx(np.std([1, 0, 1, 1], ddof=1))
    # NaN skipped (TRL's nanmean/nanstd): short is {1, 0, 0}
    assert stats["rewards/short/mean"] == pytest.approx(1 / 3)
    assert stats["rewards/short/std"] == pytest.approx(np.std([1, 0, 0], ddof=1))
    assert stats["completions/mean_length"] == 5.0
    assert stats["completions/clipped_ratio"] == 0.25
    assert stats["completions/mean_terminated_length"] == 4.0  # (4 + 2 + 6) / 3
    assert stats["num_tokens"] == 20 + 20
    assert (stats["reward_min"], stats["reward_max"]) == (0.0, 1.0)


def test_all_clipped_and_empty_steps():
    clipped = [GroupRecord(index=0, example_id=0, prompt="p",
                           trajectories=[_t(0.0, {}, 8, truncated=True)])]
    assert step_stats(clipped)["completions/mean_terminated_length"] == 0.0
    assert step_stats([]) == {}


def test_grpo_advantages_mean_centred_and_zero_for_equal_rewards():
    assert grpo_advantages([1.0, 1.0, 1.0]).tolist() == [0.0, 0.0, 0.0]
    values = grpo_advantages([1.0, 0.0]).tolist()
    assert values[0] == pytest.approx(0.5 / (math.sqrt(0.5) + 1e-4)) and sum(values) == 0.0
    assert grpo_advantages([0.3]).tolist() == [0.0]


def test_engine_step_metrics_carry_trl_parity_names(tmp_path):
    writer = StoreWriter(tmp_path / "r.db")
    run = RunRef(writer, writer.start_run("r", "arithmetic", {}, {}), "r")
    recorder = Recorder(run, success=SuccessRule("correct"), weights={"correct": 1.0, "short": 0.0})
    metrics = recorder.record(StepRecord(1, GROUPS, {"loss": 0.1, "step_seconds": 2.5, "step_time": 2.5}))
    for name in ("rewards/correct/mean", "rewards/short/std", "completions/clipped_ratio",
                 "completions/mean_terminated_length", "num_tokens"):
        assert name in metrics, name
    assert metrics["step_time"] == metrics["step_seconds"] == 2.5
    assert metrics["reward"] == 0.75 and metrics["frac_reward_zero_std"] == 0.5
