"""Chapter 06: a planted collective fault ends within the timeout, the right tool names the rank,
and no rank is left behind."""

from __future__ import annotations

import pytest

from hpclab.config import ConfigError


@pytest.mark.parametrize("bad_rank", [1, 0])
def test_skip_timeout_and_monitored_barrier_name_the_rank(no_orphans, bad_rank):
    # ~2 x (1 s timeout + launch): the rank that never reaches the collective
    from hpclab import experiments

    res = experiments.run("hang", fault="skip", ranks=3, bad_rank=bad_rank, timeout_s=1.0)
    by_tool = {r["tool"]: r for r in res.records}
    assert set(by_tool) == {"timeout only", "monitored_barrier"}
    if bad_rank:  # rank 0 runs the monitored barrier and names the missing rank
        barrier = by_tool["monitored_barrier"]
        assert barrier["named_rank"] == bad_rank and barrier["found"]
        assert f"Ranks {bad_rank} failed to pass monitoredBarrier" in barrier["message"]
    # the launcher sees which rank was still running when its peers timed out
    assert by_tool["timeout only"]["named_rank"] == bad_rank
    assert "hung" in by_tool["timeout only"]["message"]
    for r in res.records:
        assert r["culprit"] == bad_rank and r["fault"] == "skip"


def test_shape_mismatch_detail_names_the_rank_plain_crash_names_no_shape(no_orphans):
    # < 2 s: both runs fail at once
    import torch.distributed as dist

    from hpclab import experiments

    before = dist.get_debug_level()
    res = experiments.run("hang", fault="shape", ranks=3, bad_rank=2, timeout_s=2.0)
    by_tool = {r["tool"]: r for r in res.records}
    detail = by_tool["TORCH_DISTRIBUTED_DEBUG=DETAIL"]
    assert detail["found"] and detail["named_rank"] == 2
    assert "Detected mismatch between collectives" in detail["message"]
    assert "TensorShape=[5]" in detail["message"] or "TensorShape=[4]" in detail["message"]
    plain = by_tool["timeout only"]
    # gloo stops the run (a rank aborts on a size it did not expect) but names no shape
    assert plain["named_rank"] >= 0 and "TensorShape" not in plain["message"]
    assert dist.get_debug_level() == before  # the parent's debug level is restored


def test_hang_config_rejects_a_rank_outside_the_run():
    from hpclab.ddp.hang import HangConfig

    with pytest.raises(ConfigError, match="bad_rank=2 is not a rank of 2"):
        HangConfig.create(bad_rank=2)
    with pytest.raises(ConfigError, match="allowed: one of skip, shape"):
        HangConfig.create(fault="deadlock")
