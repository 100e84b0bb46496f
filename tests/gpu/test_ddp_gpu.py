"""Chapter 06 on GPUs: NCCL with one GPU per rank, world size 1 included; DDP == serial there.

Ranks start by the launcher's policy (hpclab.dist.start_method): on a GPU node, forkserver for
these importable workers.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from hpclab import experiments
from hpclab.ddp.ddp_experiment import DDPConfig, train_spec
from hpclab.ddp.plain import plain_loop
from hpclab.dist import launch
from hpclab.train import TrainSpec, ddp_worker

pytestmark = pytest.mark.gpu

SPEC = TrainSpec(model="large", per_rank_batch=256, steps=40, warmup=5, samples=16384)


def test_world_size_one_with_nccl_runs_ddp():
    outs = launch(ddp_worker, 1, args=(SPEC,), backend="nccl", device="cuda")
    assert outs[0]["backend"] == "nccl" and outs[0]["device"] == "cuda:0"
    assert outs[0]["buckets"] >= 1  # really wrapped in DDP
    assert outs[0]["loss_last"] < outs[0]["loss_first"]


def test_one_gpu_rank_does_the_plain_loops_work():
    """Same spec, same batches, same steps: the same losses on the GPU (benchmarks/ddp_gpu.py
    compares their step times)."""
    spec = train_spec(DDPConfig.create(ranks=1, model="large", batch_size=256, steps=10))
    ours = launch(ddp_worker, 1, args=(spec,), device="cuda")[0]
    plain = launch(plain_loop, 1, args=(spec,), device="cuda")[0]
    assert ours["device"] == "cuda:0"
    assert ours["loss_first"] == pytest.approx(plain["loss_first"], rel=1e-5)
    assert ours["loss_last"] == pytest.approx(plain["loss_last"], rel=1e-3)


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


def test_one_gpu_allocation_runs_one_gpu_rank_beside_the_cpu_ranks():
    from hpclab.ddp.scaling import from_measurements

    if torch.cuda.device_count() != 1:
        pytest.skip("the one-GPU allocation case")
    res = experiments.run("ddp", ranks=2, steps=5, warmup=2)
    gpu = [r for r in res.records if r.get("role") == "gpu-rank"]
    assert [r["device"] for r in gpu] == ["cuda:0"]
    assert {r["device"] for r in res.records if r["tier"] == "live" and not r.get("role")} == {
        "cpu"
    }
    ar = experiments.run("allreduce", ranks=2, max_bytes=2**20)
    model = from_measurements(res, ar, max_gpus=8)
    one = next(r for r in model.records if r["tier"] == "model" and r["gpus"] == 1)
    assert one["step_s"] == pytest.approx(gpu[0]["step_s"], rel=1e-6)
