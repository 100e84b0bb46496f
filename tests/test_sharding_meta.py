"""Chapter 09 part 2, §2 and §5: meta-device initialisation under FSDP2 (weights equal to the
model built whole, ~1/N of it held while building) and the floating-point floor that "equal
weights" is judged against (DDP against DDP with the ranks' gradients summed in reverse)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hpclab import experiments
from hpclab.config import ConfigError
from hpclab.sharding.floor import equal_weights
from hpclab.sharding.meta_init import SCRATCH_NUMEL, fill_shards


def _by(result):
    return {r["strategy"]: r for r in result.records}


@pytest.fixture(scope="module")
def meta_four():
    """ddp, zero3 and hsdp on 4 ranks as 2 nodes x 2, FSDP2 built from the meta device (~8 s on
    2 busy cores): 3 layers of width 48, the last 10 rows wide, so its shards are uneven (3, 3,
    3, 1); 4 Adam steps and the floor's run."""
    return experiments.run(
        "fsdp", strategy=("ddp", "zero3", "hsdp"), ranks=4, nodes=2, width=48, depth=3, steps=1,
        warmup=1, init="meta",
    )  # fmt: skip


def test_meta_init_gives_the_weights_of_the_model_built_whole(meta_four):
    rows = _by(meta_four)
    assert rows["zero3"]["init"] == rows["hsdp"]["init"] == "meta"
    assert rows["ddp"]["init"] == "full"  # DDP replicates the whole model: nothing to skip
    for rec in rows.values():
        assert rec["init_max_diff_vs_full"] == 0.0, rec["strategy"]


def test_meta_init_holds_only_the_shards_while_building(meta_four):
    rows = _by(meta_four)
    whole = 4 * rows["ddp"]["params"]  # fp32
    assert rows["ddp"]["build_peak_bytes_per_rank"] >= whole
    # ZeRO-3: a quarter (each layer padded to 4 shards: a hair more) and the 4 KiB scratch
    zero3 = rows["zero3"]["build_peak_bytes_per_rank"]
    assert whole / 4 <= zero3 <= 1.02 * whole / 4 + 4 * SCRATCH_NUMEL
    # HSDP shards over the 2 ranks of a node: half
    hsdp = rows["hsdp"]["build_peak_bytes_per_rank"]
    assert whole / 2 <= hsdp <= 1.02 * whole / 2 + 4 * SCRATCH_NUMEL


def test_the_floor_is_another_order_of_the_same_sum(meta_four):
    """At 4 ranks a reversed sum changes last bits (floor > 0) but no more than rounding; each
    strategy's difference from DDP is of that size."""
    rows = _by(meta_four)
    floor = rows["ddp"]["params_max_diff_floor"]
    assert 0 < floor < 1e-5
    for rec in rows.values():
        assert rec["params_max_diff_floor"] == floor
        assert equal_weights(rec["params_max_diff_vs_ddp"], floor), rec["strategy"]


def test_full_init_builds_the_whole_model_and_two_ranks_have_no_floor():
    """~4 s: built whole, ZeRO-3 holds the whole model before sharding it; on 2 ranks a + b ==
    b + a, so ZeRO-3 ends exactly on DDP's weights and there is no floor to measure."""
    rows = _by(
        experiments.run(
            "fsdp", strategy=("ddp", "zero3"), ranks=2, width=48, depth=3, steps=1, warmup=1
        )  # fmt: skip
    )
    assert rows["zero3"]["init"] == "full"
    assert rows["zero3"]["build_peak_bytes_per_rank"] >= 4 * rows["zero3"]["params"]
    assert rows["zero3"]["params_max_diff_vs_ddp"] == 0.0
    assert rows["zero3"]["params_max_diff_floor"] == 0.0


def test_equal_weights_refuses_what_a_bug_would_do():
    assert equal_weights(2.6e-5, 2.6e-5)  # the default model on 4 ranks, measured
    assert not equal_weights(1e-3, 2.6e-5)  # one Adam step of lr 1e-3 in the wrong place
    assert not equal_weights(2e-5, 0.0)  # no other order (2 ranks): the plain bar


def test_fill_shards_knows_linear_layers_only():
    with pytest.raises(ValueError, match="nn.Linear only, not Conv2d"):
        fill_shards(nn.Sequential(nn.Conv2d(1, 2, 3)), seed=0)
    model = nn.Linear(5, 3)  # no process group: one shard, the whole layer, as make_model draws
    fill_shards(model, seed=7)
    torch.manual_seed(7)
    ref = nn.Linear(5, 3)
    assert torch.equal(model.weight, ref.weight) and torch.equal(model.bias, ref.bias)


def test_an_init_that_does_not_exist_is_refused():
    with pytest.raises(ConfigError, match="init='lazy' is not allowed"):
        experiments.get("fsdp").config.create(init="lazy")
