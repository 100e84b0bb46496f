"""hpclab.train's extension points: optimizer, learning-rate schedule, activation checkpointing
and FLOPs per sample, each on one and two ranks where it trains."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from hpclab.train import TrainSpec, run_spec
from hpclab.train.optim import lr_factor

# 512 samples of 8x8; 16 per rank on 2 ranks = 16 steps per epoch, 12 steps in all.
SPEC = TrainSpec(
    model="tiny", side=8, per_rank_batch=16, steps=10, warmup=2, lr=0.01, samples=512,
    measure_compute=False, measure_allreduce=False, return_params=True,
)  # fmt: skip


# forked ranks start with the engine's lazy imports done (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("preloaded")


def test_the_warmup_decay_schedule_climbs_then_falls_to_zero():
    got = [lr_factor("warmup-decay", k, 10, 4) for k in range(10)]
    assert got[:4] == [0.25, 0.5, 0.75, 1.0]
    assert got[4:] == pytest.approx([6 / 6, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6])
    assert lr_factor("constant", 7, 10, 4) == 1.0
    with pytest.raises(ValueError, match="schedule='cosine' is not known; allowed: constant"):
        TrainSpec(schedule="cosine")
    with pytest.raises(
        ValueError, match="optimizer='lion' is not known; allowed: sgd, sgd-momentum, adam"
    ):
        TrainSpec(optimizer="lion")


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_two_ranks_with_an_optimizer_and_a_schedule_equal_one_rank_with_the_global_batch(
    optimizer,
):
    spec = replace(SPEC, optimizer=optimizer, schedule="warmup-decay", lr_warmup=3)
    two = run_spec(spec, 2, device="cpu", threads=1)
    one = run_spec(replace(spec, per_rank_batch=32), 1, device="cpu", threads=1)[0]
    sgd = run_spec(replace(SPEC, per_rank_batch=32), 1, device="cpu", threads=1)[0]
    assert torch.equal(two[0]["flat_params"], two[1]["flat_params"])
    assert torch.allclose(two[0]["flat_params"], one["flat_params"], atol=1e-5)
    assert not torch.allclose(one["flat_params"], sgd["flat_params"], atol=1e-3)  # honoured
    assert one["lr_last"] == 0.0 and two[0]["lr_last"] == 0.0  # the decay ran to its end
    assert sgd["lr_last"] == SPEC.lr  # the default keeps a constant rate


def _saved_bytes(model, x):
    total = [0]

    def pack(t):
        total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)  # what forward keeps for backward (backward's recomputation not counted)
    out.sum().backward()
    return total[0]


def test_checkpointing_keeps_fewer_activations_and_trains_the_same_weights_on_1_and_2_ranks():
    from hpclab.train import Checkpointed, make_model

    x = torch.randn(64, 256)
    plain = _saved_bytes(make_model("deep", 256, depth=8, width=128), x)
    ckpt = _saved_bytes(Checkpointed(make_model("deep", 256, depth=8, width=128)), x)
    assert ckpt < plain / 2  # only each segment's input is kept in forward
    spec = replace(SPEC, model="deep", checkpoint=True)
    for ranks in (1, 2):
        on = run_spec(spec, ranks, device="cpu", threads=1)
        off = run_spec(replace(spec, checkpoint=False), ranks, device="cpu", threads=1)
        assert torch.allclose(on[0]["flat_params"], off[0]["flat_params"], atol=1e-6)


def test_flops_per_sample_counts_forward_and_backward():
    from hpclab.train import flops_per_sample, make_model

    tiny = 2 * (64 * 128 + 128 * 10)  # multiply-adds of the forward pass, 2 operations each
    # backward: the weight gradients (as many again) and the input gradient of the second
    # layer only (the first layer's input needs none)
    assert flops_per_sample(make_model("tiny", 64), 64) == 2 * tiny + 2 * 128 * 10
    out = run_spec(SPEC, 2, device="cpu", threads=1)
    assert out[0]["flops_per_sample"] == 2 * (2 * (64 * 128 + 128 * 10)) + 2 * 128 * 10


def test_fp16_trains_with_a_loss_scaler_on_1_and_2_ranks_and_bf16_without_one():
    spec = replace(SPEC, dtype="fp16")
    two = run_spec(spec, 2, device="cpu", threads=1)
    one = run_spec(replace(spec, per_rank_batch=32), 1, device="cpu", threads=1)[0]
    fp32 = run_spec(replace(SPEC, per_rank_batch=32), 1, device="cpu", threads=1)[0]
    bf16 = run_spec(replace(SPEC, per_rank_batch=32, dtype="bf16"), 1, device="cpu", threads=1)[0]
    assert torch.equal(two[0]["flat_params"], two[1]["flat_params"])  # one scaled all-reduce
    # fp16 products round to 11 significant bits: close to fp32 and to the two-rank run, not equal
    assert torch.allclose(two[0]["flat_params"], one["flat_params"], atol=2e-3)
    assert torch.allclose(one["flat_params"], fp32["flat_params"], atol=2e-3)
    assert not torch.equal(one["flat_params"], fp32["flat_params"])  # the dtype was honoured
    assert one["loss_scale"] == two[0]["loss_scale"] == 2.0**16  # GradScaler's initial scale
    assert fp32["loss_scale"] == bf16["loss_scale"] == 1.0  # no scaler without fp16


def test_checkpointing_every_kth_block_keeps_a_kth_of_the_inputs_on_1_and_2_ranks():
    from hpclab.train import Checkpointed, make_model

    x = torch.randn(64, 256)
    deep = dict(depth=12, width=128)
    every = {k: _saved_bytes(Checkpointed(make_model("deep", 256, **deep), k), x) for k in (1, 4)}
    assert len(Checkpointed(make_model("deep", 256, **deep), 4).blocks) == 3  # 12 blocks / 4
    assert every[4] < every[1] / 2  # 3 segment inputs are kept instead of 12 block inputs
    spec = replace(SPEC, model="deep", checkpoint=True, checkpoint_every=5)  # 24 blocks: 5 segs
    for ranks in (1, 2):
        on = run_spec(spec, ranks, device="cpu", threads=1)
        off = run_spec(replace(spec, checkpoint=False), ranks, device="cpu", threads=1)
        assert torch.allclose(on[0]["flat_params"], off[0]["flat_params"], atol=1e-6)


def test_a_dtype_or_a_checkpoint_interval_that_does_not_exist_gets_one_line():
    with pytest.raises(ValueError, match=r"^checkpoint_every=25 is larger than model 'deep'.s "
                       r"24 blocks; allowed: 1\.\.24$"):  # fmt: skip
        TrainSpec(model="deep", checkpoint=True, checkpoint_every=25)
    with pytest.raises(ValueError, match=r"checkpoint_every=0; allowed: a whole number >= 1"):
        TrainSpec(checkpoint_every=0)
    from hpclab.train import autocast

    with pytest.raises(ValueError, match=r"dtype='fp8' is not a training dtype here; allowed"):
        autocast("cpu", "fp8")
