"""Chapter 05: versions, staleness and the stale-synchronous rule on scripted schedules."""

from __future__ import annotations

import pytest
import torch

from hpclab.sgd.staleness import (
    SCRIPT,
    SCRIPT_STALENESS,
    ParameterShard,
    apply_gradient,
    replay_interleaving,
    simulate_ssp,
    ssp_allows,
)


def test_scripted_interleaving_gives_the_expected_staleness_and_parameters():
    shard, reported = replay_interleaving(SCRIPT, lr=0.1)
    assert tuple(reported) == SCRIPT_STALENESS == tuple(shard.staleness)
    assert shard.version == 6
    # Each trainer t pushes the constant gradient t + 1, twice: -0.1 * 2 * (1 + 2 + 3).
    assert torch.allclose(shard.params, torch.full((4,), -1.2))


def test_a_gradient_from_the_future_is_refused():
    shard = ParameterShard(torch.zeros(2), lr=1.0)
    with pytest.raises(ValueError, match="version 3"):
        apply_gradient(shard, torch.ones(2), 3)
    assert shard.version == 0 and shard.params.tolist() == [0.0, 0.0]


def test_ssp_rule():
    assert ssp_allows([3, 1], 0, bound=2)
    assert not ssp_allows([4, 1], 0, bound=2)
    assert ssp_allows([1, 4], 0, bound=0)  # the slowest may always go on
    assert not ssp_allows([2, 1, 5], 2, bound=3)  # 5 - 1 = 4 > 3
    assert ssp_allows([5, 1], 0, bound=0, finished=[1])  # a finished trainer holds no one back


def test_simulated_schedules_lock_step_and_free():
    attempts = [0, 0, 0, 1, 1, 1]
    assert simulate_ssp(attempts, 2, bound=0) == ([0, 1, 0, 1, 0, 1], [])
    assert simulate_ssp(attempts, 2, bound=1)[0] == [0, 0, 1, 0, 1, 1]
    assert simulate_ssp(attempts, 2, bound=100) == (attempts, [])
