"""Chapter 06: naive ring all-reduce == dist.all_reduce; busbw; alpha-beta fit; buckets; CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from hpclab.ddp.allreduce import algbw_gbps, busbw_gbps, message_sizes
from hpclab.ddp.cost_model import fit_alpha_beta, ring_allreduce_s
from hpclab.ddp.ring import compare_worker, ring_allreduce
from hpclab.dist import launch


def _ring_vs_allreduce(ctx, numels):
    import torch.distributed as dist

    errs = []
    for numel in numels:
        gen = torch.Generator().manual_seed(ctx.rank * 100 + numel)
        x = torch.randn(numel, generator=gen).reshape(-1, 1) if numel else torch.empty(0)
        ref = x.clone()
        dist.all_reduce(ref)
        out = ring_allreduce(x, ctx.rank, ctx.world_size)
        assert out is x  # in place
        errs.append(float((x - ref).abs().max()) if numel else 0.0)
    return errs


@pytest.mark.parametrize("n", [2, 3, 4])
def test_naive_ring_equals_dist_all_reduce(n):
    # sizes below n (empty chunks), not divisible by n, and large
    outs = launch(_ring_vs_allreduce, n, args=((1, n - 1, 7, 1000, 65537),))
    for errs in outs:
        assert max(errs) < 1e-4, errs


def _broken_ring(tensor, rank, world_size):
    """A plausible bug: stop after the reduce-scatter (no all-gather)."""
    return tensor.mul_(world_size)


def test_compare_worker_detects_a_wrong_ring():
    outs = launch(compare_worker, 2, args=((4096,), 3, _broken_ring))
    assert outs[0][0]["max_abs_err"] > 0.1
    good = launch(compare_worker, 2, args=((4096,), 3))
    assert good[0][0]["max_abs_err"] < 1e-5
    assert good[0][0]["naive ring"] > 0 and good[0][0]["dist.all_reduce"] > 0


def test_busbw_is_algbw_times_two_n_minus_one_over_n():
    assert algbw_gbps(64e6, 0.04) == pytest.approx(1.6)
    assert busbw_gbps(64e6, 0.04, 2) == pytest.approx(1.6)
    assert busbw_gbps(64e6, 0.04, 4) == pytest.approx(1.6 * 1.5)
    assert busbw_gbps(64e6, 0.04, 8) == pytest.approx(1.6 * 14 / 8)
    assert message_sizes(4, 64 * 2**20)[:3] == (4, 16, 64)
    assert message_sizes(4, 64 * 2**20)[-1] == 64 * 2**20


def test_alpha_beta_fit_recovers_known_parameters():
    alpha, bw, n = 50e-6, 2e9, 4
    sizes = [4 * 4**k for k in range(13)]
    times = [ring_allreduce_s(m, n, alpha, bw) for m in sizes]
    a, b = fit_alpha_beta(sizes, times, n)
    assert a == pytest.approx(alpha, rel=1e-6) and b == pytest.approx(bw, rel=1e-6)
    with pytest.raises(ValueError):
        fit_alpha_beta([4, 4], [1e-4, 1e-4], n)
    # latency-bound sizes only (flat or falling times): B is bounded from below, never infinite
    a, b = fit_alpha_beta([4, 64, 1024], [1.0e-4, 1.0e-4, 0.9e-4], 2)
    assert b == pytest.approx(1024 / 0.9e-4) and a >= 0


def test_allreduce_experiment_fields_and_fit():
    from hpclab import experiments

    res = experiments.run("allreduce", ranks=2, max_bytes=2**16, repeat=3)
    live = [r for r in res.records if r["tier"] == "live"]
    fit = [r for r in res.records if r["tier"] == "model"]
    assert [r["bytes"] for r in live] == [4, 16, 64, 256, 1024, 4096, 16384, 65536]
    for r in live:
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 2 * (2 - 1) / 2)
        assert r["algbw_gbps"] == pytest.approx(r["bytes"] / r["time_s"] / 1e9)
        assert r["backend"] == "gloo"
    assert len(fit) == len(live) and fit[0]["alpha_s"] > 0 and fit[0]["bandwidth_gbps"] > 0


def test_ring_experiment_reports_gap_and_zero_error():
    from hpclab import experiments

    res = experiments.run("ring-allreduce", ranks=2, sizes=(4096, 65536), repeat=3)
    impls = {(r["impl"], r["bytes"]) for r in res.records}
    assert impls == {(i, b) for i in ("naive ring", "dist.all_reduce") for b in (4096, 65536)}
    assert all(r["max_abs_err"] < 1e-5 for r in res.records)
    ring = [r for r in res.records if r["impl"] == "naive ring"]
    assert all(r["slowdown"] > 0 for r in ring)


def test_bucket_sweep_counts_one_all_reduce_per_tensor_at_cap_zero():
    from hpclab import experiments

    res = experiments.run("ddp-buckets", ranks=2, caps_mb=(0.0, 25.0), steps=2, rounds=1)
    by_cap = {r["bucket_cap_mb"]: r for r in res.records}
    assert by_cap[0.0]["buckets"] == by_cap[0.0]["tensors"] == 48
    # 1.6M params x 4 B = 6.4 MB < 25 MB: DDP's default = a 1 MiB first bucket + the rest
    assert by_cap[25.0]["buckets"] == 2
    assert all(r["steps_per_s"] == pytest.approx(1 / r["step_s"]) for r in res.records)


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "hpclab.cli", "run", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_ddp_json_and_bad_input():
    out = _cli(
        "ddp",
        "--ranks",
        "2",
        "--batch-size",
        "16",
        "--model",
        "tiny",
        "--steps",
        "3",
        "--warmup",
        "1",
        "--json",
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["experiment"] == "ddp"
    rec = [r for r in data["records"] if r["tier"] == "live" and r["ranks"] == 2][0]
    for field in ("samples_per_s", "step_s", "comm_s", "efficiency"):
        assert isinstance(rec[field], float)
    bad = _cli("ddp", "--ranks", "3", "--batch-size", "64", "--scaling", "strong")
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "nearest valid: 63, 66" in bad.stderr
    big = _cli("ddp", "--ranks", "64")
    assert big.returncode == 2 and "ranks=64" in big.stderr and "Traceback" not in big.stderr
