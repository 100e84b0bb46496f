"""Chapter 06 part 2: data parallel by hand (naive, bucketed) equals DDP and one process."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from hpclab.dist import launch
from hpclab.parallel.data_parallel import make_buckets
from hpclab.parallel.dp_experiment import IMPLS, dp_worker
from hpclab.train import TrainSpec, make_model

# 512 samples of 8x8; the check phase trains `warmup` steps on identical batches per impl.
SPEC = TrainSpec(
    model="tiny",
    side=8,
    per_rank_batch=16,
    steps=2,
    warmup=5,
    lr=0.1,
    samples=512,
    return_params=True,
)


# forked ranks start with the engine's lazy imports done (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("preloaded")


# One thread per rank: on a busy machine a 2-thread serial rank can be 30x slower (OpenMP waits).


def _final(outs, impl):
    return [o["flat_params"][impl] for o in outs]


@pytest.mark.parametrize(("ranks", "model", "cap_mb"), [(2, "tiny", 25.0), (3, "deep", 0.05)])
def test_hand_written_data_parallel_equals_ddp_and_one_process(ranks, model, cap_mb):
    spec = replace(SPEC, model=model, samples=96 * ranks * 2, warmup=5 if model == "tiny" else 3)
    outs = launch(dp_worker, ranks, args=(spec, IMPLS, cap_mb, 0), threads_per_rank=1)
    serial = launch(
        dp_worker,
        1,
        args=(replace(spec, per_rank_batch=16 * ranks), IMPLS, cap_mb, 0),
        threads_per_rank=1,
    )
    reference = serial[0]["flat_params"]["naive"]  # one process: the wrappers do nothing
    for impl in IMPLS:
        replicas = _final(outs, impl)
        assert all(torch.equal(replicas[0], r) for r in replicas[1:]), f"{impl}: replicas differ"
        assert torch.allclose(replicas[0], reference, rtol=1e-5, atol=1e-6), impl
    # the comparison has teeth: one process with the per-rank batch ends elsewhere
    small = launch(dp_worker, 1, args=(spec, ("naive",), cap_mb, 0), threads_per_rank=1)[0][
        "flat_params"
    ]["naive"]
    assert not torch.allclose(outs[0]["flat_params"]["naive"], small, rtol=1e-4, atol=1e-5)
    messages = outs[0]["messages"]
    tensors = sum(1 for _ in make_model(model, 64).parameters())
    assert messages["naive"] == tensors
    if model == "deep":  # small buckets: several all-reduces in flight during backward
        assert 1 < messages["bucketed"] < tensors


def test_buckets_follow_backward_order_and_the_cap():
    model = make_model("deep", 64)  # 24 layers: 64->256, 22 x 256->256, 256->10
    params = list(model.parameters())
    buckets = make_buckets(params, cap_mb=0.5, first_mb=0.1)
    flat = [p for b in buckets for p in b.params]
    assert flat == params[::-1], "buckets must list gradients in the order backward makes them"
    sizes = [sum(p.numel() * 4 for p in b.params) for b in buckets]
    assert sizes[0] <= 0.1 * 2**20 + 256 * 256 * 4  # the small first bucket
    assert all(s <= 0.5 * 2**20 or len(b.params) == 1 for s, b in zip(sizes, buckets, strict=True))
    one = make_buckets(params, cap_mb=1e-6, first_mb=1e-6)
    assert len(one) == len(params)  # a cap below every tensor: one bucket per tensor


def test_dp_by_hand_records():
    from hpclab import experiments

    res = experiments.run(
        "dp-by-hand", ranks=2, model="tiny", batch_size=16, steps=2, rounds=1, check_steps=2
    )
    rows = {r["impl"]: r for r in res.records}
    assert set(rows) == set(IMPLS)
    for r in rows.values():
        assert r["params_max_diff"] == 0.0 and r["max_diff_vs_ddp"] < 1e-6
        assert r["exposed_comm_s"] == pytest.approx(max(0.0, r["step_s"] - r["compute_s"]))
        assert r["samples_per_s"] == pytest.approx(32 / r["step_s"])
    assert (
        rows["naive"]["allreduces_per_step"] == 4 and rows["bucketed"]["allreduces_per_step"] == 1
    )
    assert rows["naive"]["blocked_s"] > 0 and rows["ddp"]["blocked_s"] == 0.0
    assert rows["ddp"]["vs_ddp"] == 1.0
    fig = experiments.get("dp-by-hand").plot(res)
    assert len(fig.data) == 2 and len(fig.data[0].x) == 3
