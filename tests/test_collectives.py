"""Chapter 06: tree and recursive-doubling all-reduce == dist.all_reduce; their alpha-beta model."""

from __future__ import annotations

import math

import pytest
import torch

from hpclab.ddp.collective_model import (
    add_model,
    fit,
    median_errors,
    model_s,
    split_sizes,
    terms,
    winners,
)
from hpclab.ddp.collectives import ALGORITHMS
from hpclab.dist import launch


def _all_vs_allreduce(ctx, numels):
    import torch.distributed as dist

    errs = {}
    for name, impl in ALGORITHMS.items():
        for numel in numels:
            gen = torch.Generator().manual_seed(ctx.rank * 1000 + numel)
            x = torch.randn(numel, generator=gen).reshape(-1, 1) if numel else torch.empty(0)
            ref = x.clone()
            dist.all_reduce(ref)
            out = impl(x, ctx.rank, ctx.world_size)
            assert out is x  # in place, same signature as the ring
            errs[(name, numel)] = float((x - ref).abs().max()) if numel else 0.0
    return errs


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_every_algorithm_equals_dist_all_reduce(n):
    # ~1-2 s per n: 1 element, fewer elements than ranks, not divisible by n, large, empty
    outs = launch(_all_vs_allreduce, n, args=((1, n - 1, 7, 1000, 65537, 0),))
    for errs in outs:
        assert set(errs) == {(a, m) for a in ALGORITHMS for m in (1, n - 1, 7, 1000, 65537, 0)}
        bad = {k: v for k, v in errs.items() if v > 1e-4}
        assert not bad, bad


def _tree_without_broadcast(tensor, rank, world_size):
    """A plausible bug: the reduce only (rank 0 has the sum, the others their partial sums)."""
    import torch.distributed as dist

    dist.reduce(tensor, dst=0)
    return tensor


def test_compare_worker_rejects_a_reduce_without_broadcast():
    from hpclab.ddp.ring import compare_worker

    outs = launch(compare_worker, 3, args=((4096,), 3, _tree_without_broadcast))
    assert max(o[0]["max_abs_err"] for o in outs) > 0.1


def test_model_terms_follow_thakur_2005():
    assert terms("ring", 4) == (6.0, 1.5)  # 2(n-1), 2(n-1)/n
    assert terms("ring", 2) == (2.0, 1.0)
    assert terms("tree", 4) == (4.0, 4.0)  # 2 log2 n, whole message each step
    assert terms("tree", 5) == (6.0, 6.0)  # 2 ceil(log2 5)
    assert terms("doubling", 8) == (3.0, 3.0)  # log2 n
    assert terms("doubling", 6) == (4.0, 4.0)  # floor(log2 6) + 2 fix-up steps
    assert terms("builtin", 8) == terms("ring", 8)
    assert model_s("ring", 1e6, 4, 1e-5, 1e9) == pytest.approx(6e-5 + 1.5e-3)
    with pytest.raises(ValueError, match="allowed"):
        terms("butterfly", 4)


def test_fit_recovers_alpha_beta_and_predicts_held_out_sizes():
    sizes = [4 * 4**k for k in range(12)]
    for algorithm in ("ring", "tree", "doubling"):
        recs = [
            {
                "tier": "live",
                "algorithm": algorithm,
                "ranks": 3,
                "bytes": m,
                "seconds": model_s(algorithm, m, 3, 2e-5, 3e9),
            }
            for m in sizes
        ]
        a, bw = fit(algorithm, 3, sizes, [r["seconds"] for r in recs])
        assert a == pytest.approx(2e-5, rel=1e-6) and bw == pytest.approx(3e9, rel=1e-6)
        rows = add_model(recs)
        assert len(rows) == len(sizes) and all(r["tier"] == "model" for r in rows)
        assert median_errors(recs)[algorithm] == pytest.approx(0.0, abs=1e-9)
    train, held = split_sizes(sizes)
    assert held and not set(train) & set(held) and max(sizes) in train and min(sizes) in train


def test_fit_reads_each_size_least_disturbed_sample():
    # medians bent by load (every other size twice as slow), best samples on the model's line:
    # the fit and its held-out errors read the best samples
    sizes = [4 * 4**k for k in range(10)]
    recs = [
        {
            "tier": "live",
            "algorithm": "tree",
            "ranks": 2,
            "bytes": m,
            "seconds": model_s("tree", m, 2, 5e-5, 1e9) * (2 if k % 2 else 1),
            "seconds_best": model_s("tree", m, 2, 5e-5, 1e9),
        }
        for k, m in enumerate(sizes)
    ]
    add_model(recs)
    assert recs[0]["alpha_s"] == pytest.approx(5e-5, rel=1e-6)
    assert median_errors(recs)["tree"] == pytest.approx(0.0, abs=1e-9)
    for r in recs:
        del r["seconds_best"]
    add_model(recs)  # without best samples: the medians, and their bend shows
    assert median_errors(recs)["tree"] > 0.2


def test_model_says_where_each_wins():
    table = winners(2e-5, 2e9, [4, 64 * 2**20], [2, 8, 64])
    win = {(r["ranks"], r["bytes"]): r["winner"] for r in table}
    assert win[(64, 4)] == "doubling"  # latency-bound, many ranks: log2 n steps
    assert win[(64, 64 * 2**20)] == "ring"  # bandwidth-bound: 2(n-1)/n < 2 bytes factor
    assert math.isclose(table[0]["ring"], model_s("ring", 4, 2, 2e-5, 2e9))


def test_allreduce_experiment_algorithms_records():
    # 3 hand-written algorithms x 1, 4, 16 MiB on 2 gloo ranks (few calls per sample): ~3 s
    from hpclab import experiments

    res = experiments.run(
        "allreduce",
        ranks=2,
        min_bytes=2**20,
        max_bytes=2**24,
        algorithm=("ring", "tree", "doubling"),
        repeat=3,
    )
    live = [r for r in res.records if r["tier"] == "live"]
    assert {r["algorithm"] for r in live} == {"ring", "tree", "doubling"}
    for r in live:
        for field in ("algorithm", "bytes", "seconds", "busbw_gbps", "model_seconds"):
            assert field in r
        assert r["busbw_gbps"] == pytest.approx(r["bytes"] / r["seconds"] / 1e9)  # n = 2
        assert 0 < r["seconds_best"] <= r["seconds"]
        a, bw = r["alpha_s"], r["bandwidth_gbps"] * 1e9
        assert r["model_seconds"] == pytest.approx(model_s(r["algorithm"], r["bytes"], 2, a, bw))
    assert any(r["held_out"] for r in live) and not all(r["held_out"] for r in live)
    assert {r["impl"] for r in res.records if r["tier"] == "model"} == {
        "ring model",
        "tree model",
        "doubling model",
    }
    one = experiments.run("allreduce", ranks=2, min_bytes=2**20, max_bytes=2**20, algorithm="tree")
    assert {r["algorithm"] for r in one.records} == {"tree"}


def test_receive_buffer_is_reused_and_grown():
    # the hand-written all-reduces receive into one buffer per process: no new pages per call
    from hpclab.ddp.scratch import receive_buffer

    x = torch.zeros(10)
    a = receive_buffer(x, 1000)
    assert a.shape == (1000,) and a.dtype == torch.float32 and a.is_contiguous()
    assert receive_buffer(x, 1000).data_ptr() == a.data_ptr()  # the same memory next call
    assert receive_buffer(x, 10).data_ptr() == a.data_ptr()  # a smaller message: a view of it
    big = receive_buffer(x, 5000)  # a bigger one: grown, then reused
    assert big.numel() == 5000 and receive_buffer(x, 5000).data_ptr() == big.data_ptr()
    other = receive_buffer(torch.zeros(3, dtype=torch.float64), 1000)
    assert other.dtype == torch.float64 and other.data_ptr() != big.data_ptr()
