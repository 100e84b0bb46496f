"""Chapter 06 part 2 on GPUs: NCCL ranks, one GPU each; every strategy equal to one process."""

from __future__ import annotations

import pytest
import torch

from hpclab import experiments

pytestmark = pytest.mark.gpu

needs_two = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")


@needs_two
def test_dp_by_hand_on_nccl_equals_ddp():
    res = experiments.run("dp-by-hand", ranks=2, device="cuda", steps=5, rounds=1, check_steps=3)
    for r in res.records:
        assert r["backend"] == "nccl" and r["params_max_diff"] == 0.0
        assert r["max_diff_vs_ddp"] < 1e-5


@needs_two
def test_pipeline_on_nccl_equals_one_process():
    res = experiments.run(
        "pipeline", stages=2, micro_batches=4, batch_size=64, layers=4, width=64, steps=2,
        rounds=1, device="cuda",
    )  # fmt: skip
    for r in res.records:
        if r["kind"] == "schedule":
            assert r["device"] == "cuda:0" and r["max_diff_vs_serial"] < 1e-4, r


@needs_two
def test_tensor_parallel_on_nccl_equals_the_unsplit_layer():
    res = experiments.run(
        "tensor-parallel", ranks=2, in_features=256, out_features=128, batch_sizes=(16, 64),
        device="cuda",
    )  # fmt: skip
    for r in res.records:
        assert r["device"] == "cuda:0" and r["bytes_per_rank"] == r["model_bytes_per_rank"]
        assert max(r["max_err_y"], r["max_err_dx"]) < 1e-3, r
