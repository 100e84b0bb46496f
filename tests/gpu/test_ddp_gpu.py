"""Chapter 06 on GPUs: NCCL with one GPU per rank, world size 1 included; DDP == serial there.

Ranks are forked before this process touches CUDA (the launcher falls back to spawn, with
importable workers, when an earlier test initialised it).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

import pytest
import torch

from hpclab import experiments
from hpclab.ddp.worker import TrainSpec, batches, dataset, ddp_worker
from hpclab.dist import RankContext, launch
from hpclab.train import make_model, train_step

pytestmark = pytest.mark.gpu

SPEC = TrainSpec(model="large", per_rank_batch=256, steps=40, warmup=5, samples=16384)


def test_world_size_one_with_nccl_runs_ddp():
    outs = launch(ddp_worker, 1, args=(SPEC,), backend="nccl", device="cuda")
    assert outs[0]["backend"] == "nccl" and outs[0]["device"] == "cuda:0"
    assert outs[0]["buckets"] >= 1  # really wrapped in DDP
    assert outs[0]["loss_last"] < outs[0]["loss_first"]


def _plain_loop(ctx: RankContext, spec: TrainSpec) -> float:
    """The loop people write: same data pipeline and step, perf_counter + synchronize."""
    model = make_model(spec.model, spec.side**2, seed=spec.seed).to(ctx.device)
    opt = torch.optim.SGD(model.parameters(), lr=spec.lr)
    stream = batches(ctx, spec, dataset(spec))
    times = []
    for i in range(spec.warmup + spec.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        train_step(model, opt, *next(stream))
        torch.cuda.synchronize()
        if i >= spec.warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def test_single_gpu_throughput_matches_a_plain_loop():
    ours, plain = [], []
    for _ in range(3):  # interleaved
        res = experiments.run(
            "ddp", ranks=1, model="large", batch_size=256, steps=40, device="cuda"
        )
        ours.append(res.records[0]["step_s"])
        plain.append(launch(_plain_loop, 1, args=(SPEC,), device="cuda")[0])
    assert res.records[0]["device"] == "cuda:0"
    assert statistics.median(ours) <= 1.05 * statistics.median(plain)


def test_ddp_on_all_gpus_equals_one_gpu_with_global_batch():
    n = torch.cuda.device_count()
    if n < 2:
        pytest.skip("needs 2 GPUs")
    spec = replace(
        SPEC,
        model="tiny",
        per_rank_batch=16,
        steps=10,
        samples=1024,
        measure_compute=False,
        measure_allreduce=False,
        return_params=True,
    )
    outs = launch(ddp_worker, n, args=(spec,), device="cuda")
    assert all(o["backend"] == "nccl" for o in outs)
    serial = launch(ddp_worker, 1, args=(replace(spec, per_rank_batch=16 * n),), device="cuda")
    assert torch.allclose(outs[0]["flat_params"], serial[0]["flat_params"], atol=1e-4)
    ar = experiments.run("allreduce", ranks=n, max_bytes=2**24, device="cuda")
    assert all(r["backend"] == "nccl" for r in ar.records if r["tier"] == "live")


def test_too_many_gpus_is_refused_with_what_exists():
    from hpclab.config import ConfigError

    n = torch.cuda.device_count()
    refusal = f"needs one GPU per rank: ranks={n + 1} but {n} GPU\\(s\\) are visible"
    with pytest.raises(ConfigError, match=refusal):
        experiments.run("ddp", ranks=n + 1, device="cuda")
