"""Chapter 09 part 2 on GPUs: FSDP2's CPU offload frees the GPU of the training state the ZeRO
model counts, and costs step time (reported, not asserted). One GPU, or two where present.
(Written without a GPU at hand: run it where one exists, ``pytest tests/gpu -m gpu -s``.)"""

from __future__ import annotations

import pytest
import torch

from hpclab.dist import launch
from hpclab.sharding.offload import offload_worker
from hpclab.sharding.planner import state_bytes
from hpclab.train import TrainSpec

pytestmark = pytest.mark.gpu


def test_cpu_offload_frees_the_state_the_model_predicts(record_property):
    """~20 s: a 27 M-parameter MLP (8 layers of 2048), Adam fp32, ZeRO-3 with and without
    ``CPUOffloadPolicy``: the GPU bytes held between steps drop by parameters + gradients +
    Adam's two moments of one rank's shard, 16 bytes a parameter / N."""
    ranks = min(2, torch.cuda.device_count())
    spec = TrainSpec.sized(ranks, model="deep", side=28, per_rank_batch=64, steps=5, warmup=2,
                           lr=1e-3, optimizer="adam")  # fmt: skip
    outs = launch(offload_worker, ranks, args=(spec, 8, 2048), device="cuda", backend="nccl")
    for rows in outs:
        plain, off = rows
        assert not plain["offload"] and off["offload"]
        want = state_bytes(plain["params"], ranks, 3, "fp32")["total"]
        assert plain["held_bytes"] - off["held_bytes"] == pytest.approx(want, rel=0.03)
        assert off["held_bytes"] < 0.05 * plain["held_bytes"]  # the state was all of it
        assert off["peak_bytes"] < plain["peak_bytes"]
    plain, off = outs[0]
    ratio = off["step_s"] / plain["step_s"]
    record_property("offload_step_time_ratio", ratio)
    print(f"\n{ranks} GPU(s), {plain['params'] / 1e6:.1f} M parameters: held between steps "
          f"{plain['held_bytes'] / 2**20:.0f} -> {off['held_bytes'] / 2**20:.0f} MiB, peak "
          f"{plain['peak_bytes'] / 2**20:.0f} -> {off['peak_bytes'] / 2**20:.0f} MiB, step "
          f"{plain['step_s'] * 1e3:.1f} -> {off['step_s'] * 1e3:.1f} ms ({ratio:.1f}x)")  # fmt: skip


@pytest.mark.parametrize("init", ["full", "meta"])
def test_cpu_ranks_stay_on_the_cpu_where_a_gpu_is_visible(init):
    """Chapter 09 part 2 runs CPU ranks with gloo on any machine. Without a mesh of their own,
    ``fully_shard`` made a CUDA mesh wherever a GPU was visible and moved the CPU ranks' layers
    onto cuda:0 (an H100 run: the loss saw a CPU target, ranks died by SIGSEGV)."""
    from hpclab import experiments

    res = experiments.run("fsdp", strategy=("ddp", "zero3"), ranks=2, width=64, depth=3,
                          steps=2, warmup=1, init=init)  # fmt: skip
    rows = {r["strategy"]: r for r in res.records if r.get("tier") == "live"}
    assert set(rows) == {"ddp", "zero3"}
    assert rows["zero3"]["weights_equal_to_ddp"], rows["zero3"]
