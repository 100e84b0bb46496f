"""Chapter 06 part 2: a linear layer split by columns or rows equals the unsplit layer."""

from __future__ import annotations

import pytest
import torch

from hpclab.config import ConfigError
from hpclab.dist import launch
from hpclab.parallel.tensor_parallel import ColumnParallelLinear, CommTally, RowParallelLinear
from hpclab.parallel.tp_experiment import TensorParallelConfig, model_bytes_per_rank


@pytest.mark.parametrize("ranks", [2, 4])
def test_split_layers_equal_the_unsplit_layer_and_count_their_bytes(ranks):
    from hpclab import experiments

    res = experiments.run(
        "tensor-parallel", ranks=ranks, in_features=64, out_features=32, batch_sizes=(8, 64),
        repeat=1,
    )  # fmt: skip
    for r in res.records:
        assert r["max_err_y"] < 1e-5 and r["max_err_dx"] < 1e-5 and r["max_err_dw"] < 1e-4, r
        assert r["bytes_per_rank"] == pytest.approx(r["model_bytes_per_rank"]), r
        assert r["collectives"] == 2  # one forward, one backward (dp: weight + bias)
    by = {(r["mode"], r["batch"]): r for r in res.records}
    full = (64 * 32 + 32) * 4
    assert by["dp", 8]["param_bytes_per_rank"] == full
    assert by["column", 8]["param_bytes_per_rank"] == full // ranks
    # data parallel's traffic is the weights whatever the batch; the split layer's grows with it
    assert by["dp", 8]["bytes_per_rank"] == by["dp", 64]["bytes_per_rank"]
    assert by["column", 64]["bytes_per_rank"] == 8 * by["column", 8]["bytes_per_rank"]
    assert by["column", 8]["bytes_per_rank"] < by["dp", 8]["bytes_per_rank"]


def _megatron_pair(ctx):
    """Column-split (no gather) then row-split (input already split) vs two unsplit layers."""
    torch.manual_seed(0)
    a, b = torch.nn.Linear(16, 64), torch.nn.Linear(64, 16)
    x = torch.randn(8, 16)
    xr = x.clone().requires_grad_()
    ref = b(torch.relu(a(xr)))
    ref.sum().backward()
    tally = CommTally()
    col = ColumnParallelLinear(a, gather_output=False, tally=tally)
    row = RowParallelLinear(b, input_is_split=True, tally=tally)
    xs = x.clone().requires_grad_()
    y = row(torch.relu(col(xs)))
    y.sum().backward()
    return {
        "y": float((y - ref).abs().max()),
        "dx": float((xs.grad - xr.grad).abs().max()),
        "dw": float((col.weight.grad - a.weight.grad.chunk(ctx.world_size)[ctx.rank]).abs().max()),
        "calls": dict(tally.calls),
    }


def test_megatron_pair_needs_one_all_reduce_each_way():
    for out in launch(_megatron_pair, 2):
        assert out["y"] < 1e-5 and out["dx"] < 1e-5 and out["dw"] < 1e-5
        assert out["calls"] == {"all_reduce": 2}


def test_one_process_is_the_plain_layer():
    torch.manual_seed(1)
    full = torch.nn.Linear(8, 6)
    x = torch.randn(4, 8)
    assert torch.allclose(ColumnParallelLinear(full)(x), full(x))
    assert torch.allclose(RowParallelLinear(full)(x), full(x), atol=1e-6)


def test_bytes_model_and_bad_splits():
    # p = 2, B = 10, in = 4, out = 6: column sends half its 10x6 output once, all-reduces dx
    assert model_bytes_per_rank("column", 10, 4, 6, 2) == 4 * 10 * 6 / 2 + 4 * 10 * 4
    assert model_bytes_per_rank("dp", 10, 4, 6, 2) == 4 * (24 + 6)
    assert model_bytes_per_rank("row", 10, 4, 6, 1) == 0.0
    with pytest.raises(ConfigError, match=r"out_features=30 is not divisible by ranks=4"):
        TensorParallelConfig(ranks=4, out_features=30, in_features=32, batch_sizes=(8,))
    with pytest.raises(ConfigError, match=r"batch_sizes contains 6, not divisible by ranks=4"):
        TensorParallelConfig(ranks=4, out_features=32, in_features=32, batch_sizes=(6,))
