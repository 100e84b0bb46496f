"""Chapter 09 part 2: ZeRO-1/2/3 (FSDP2) beside DDP on gloo ranks, the ZeRO-1 by hand, the planner."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from hpclab import experiments
from hpclab.config import ConfigError
from hpclab.sharding.floor import equal_weights
from hpclab.sharding.fsdp_experiment import FsdpConfig, _params
from hpclab.sharding.planner import PlanConfig, plan, run_plan, state_bytes
from hpclab.sharding.zero1 import Zero1Optimizer
from hpclab.train import make_model, parameter_count, train_step


@pytest.fixture(scope="module")
def two_ranks():
    """One 2-rank run of every strategy (~15 s on 2 busy cores): 4 layers of width 128, Adam,
    warm-up 2 + 1 probed + 10 timed = 13 steps each."""
    return experiments.run(
        "fsdp", strategy=("ddp", "zero1", "zero1-torch", "zero2", "zero3", "zero3-bf16"), ranks=2,
        width=128, depth=4, steps=10, warmup=2,
    )  # fmt: skip


def _by(result):
    return {r["strategy"]: r for r in result.records}


def test_every_strategy_ends_on_ddps_weights(two_ranks):
    rows = _by(two_ranks)
    for name, rec in rows.items():
        if name != "zero3-bf16":  # 2 ranks: no other order of the sum (floor 0), so <= 1e-5
            assert equal_weights(rec["params_max_diff_vs_ddp"], rec["params_max_diff_floor"]), name
    # bf16 compute changes the arithmetic: not equal, yet within what 13 Adam steps of at most
    # ~lr each can move two runs apart
    assert 1e-5 < rows["zero3-bf16"]["params_max_diff_vs_ddp"] < 2 * 13 * 1e-3


def test_sharded_state_shrinks_as_the_zero_model_says(two_ranks):
    rows = _by(two_ranks)
    ddp = rows["ddp"]["state_bytes_per_rank"]
    assert rows["zero3"]["state_bytes_per_rank"] <= 0.55 * ddp  # the benchmark's goal line
    for name in ("ddp", "zero1", "zero3"):  # FSDP2's zero2 reshards after backward: zero3's bytes
        rec = rows[name]
        assert rec["state_bytes_per_rank"] == pytest.approx(rec["model_state_bytes"], rel=0.01)
    assert rows["zero2"]["state_bytes_per_rank"] == rows["zero3"]["state_bytes_per_rank"]
    assert rows["zero1"]["state_bytes_per_rank"] < ddp
    for rec in rows.values():  # a step allocates gradients and temporaries beyond the state
        assert rec["peak_bytes_per_rank"] > rec["state_bytes_per_rank"]


def test_bytes_sent_follow_the_zero_paper(two_ranks):
    rows = _by(two_ranks)
    ddp = rows["ddp"]["comm_bytes_per_step"]
    assert ddp == pytest.approx(rows["ddp"]["model_comm_bytes"], rel=0.01)
    assert rows["zero1"]["comm_bytes_per_step"] == pytest.approx(ddp, rel=0.01)
    assert rows["zero2"]["comm_bytes_per_step"] == pytest.approx(ddp, rel=0.01)
    assert rows["zero3"]["comm_bytes_per_step"] == pytest.approx(1.5 * ddp, rel=0.01)
    # bf16 all-gathers (2 bytes) + an fp32 reduce-scatter: DDP's fp32 volume again
    assert rows["zero3-bf16"]["comm_bytes_per_step"] == pytest.approx(ddp, rel=0.01)
    assert rows["zero3-bf16"]["state_bytes_per_rank"] == rows["zero3"]["state_bytes_per_rank"]
    assert set(rows["zero1"]["comm_calls"]) == {"reduce_scatter", "all_gather"}
    assert set(rows["zero1-torch"]["comm_calls"]) == {"all_reduce", "broadcast"}
    assert rows["ddp"]["comm_calls"].keys() == {"all_reduce"}


def test_zero1_alone_is_the_plain_optimizer():
    """One process, no group: ZeRO-1's flat slice is the whole vector, the optimizer
    elementwise. (Momentum SGD, not Adam: on one flat vector a few elements fall in a SIMD
    kernel's body that were in a tensor's scalar tail, which may round the last bit otherwise,
    and Adam's first, sign-like step turns a last-bit difference of a near-zero gradient into
    2 x lr.)"""
    torch.manual_seed(0)
    x, y = torch.randn(16, 64), torch.randint(0, 10, (16,))
    a, b = make_model("tiny", 64, seed=0), make_model("tiny", 64, seed=0)
    opt_a = torch.optim.SGD(a.parameters(), lr=0.1, momentum=0.9)
    opt_b = Zero1Optimizer(b.parameters(), lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9))
    for _ in range(5):
        train_step(a, opt_a, x, y)
        train_step(b, opt_b, x, y)
    for p, q in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.allclose(p, q, atol=1e-6)


def test_planner_reproduces_the_zero_paper():
    """Rajbhandari et al. 2020, Fig. 1 / Table 1: 7.5 B parameters, 64 GPUs, K = 12."""
    got = [state_bytes(7.5e9, 64, s, "mixed")["total"] / 1e9 for s in range(4)]
    assert [round(g, 1) for g in got] == [120.0, 31.4, 16.6, 1.9]
    assert got[3] == pytest.approx(1.88, abs=0.005)  # Table 1's unrounded figure


def test_planner_fits_and_refuses():
    cfg = PlanConfig.create(params_b=7.5, gpus=64, micro_batch=0, device="v100-32")
    assert [plan(cfg, s)["fits"] for s in range(4)] == [False, True, True, True]
    result = run_plan(cfg, experiments.Progress())
    largest = {r["stage"]: r["largest_params_b"] for r in result.records}
    # Table 1's N_d = 64 column on 32 GB V100s: plain DP stops near 2 B (32/16), ZeRO-3 ~128 B
    assert largest[0] == pytest.approx(2.0, rel=0.01)
    assert largest[3] == pytest.approx(128.0, rel=0.01)
    assert largest[0] < largest[1] < largest[2] < largest[3]
    ckpt = PlanConfig.create(params_b=7.5, gpus=64, micro_batch=8, checkpointing=True)
    assert (
        plan(ckpt, 3)["activations_gb"]
        < plan(PlanConfig.create(micro_batch=8), 3)["activations_gb"] / 5
    )


def test_a_stage_that_does_not_exist_is_one_line_on_the_command_line():
    env = {**os.environ, "HPCLAB_QUICK": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "hpclab.cli", "run", "fsdp", "--strategy", "zero4"],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "strategy='zero4' is not allowed; allowed: one of ddp" in lines[0]


@pytest.mark.parametrize(
    ("name", "params", "fragment"),
    [
        ("zero-plan", {"stage": 4}, "stage=4"),
        ("fsdp", {"width": 4096, "depth": 64, "ranks": 16}, "(estimate: 16 bytes a parameter)"),
    ],
)
def test_bad_input_names_what_is_wrong(name, params, fragment):
    exp = experiments.get(name)
    with pytest.raises(ConfigError) as err:
        exp.config.create(**params)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_the_parameter_count_needs_no_model():
    cfg = FsdpConfig.create(width=48, depth=5)
    assert _params(cfg) == parameter_count(make_model("deep", 784, depth=5, width=48))


def test_chapter_06_planner_shards_data_parallel_with_zero():
    """One formula: 06's strategy-model gains ZeRO stages; stage 0 is its old answer."""
    from hpclab.parallel.strategies import StrategyModelConfig, predict

    plain, zero3 = StrategyModelConfig(), StrategyModelConfig(zero=3)
    params = predict(plain, "data", 1)["params"]
    assert predict(plain, "data", 64)["memory_gb"] == predict(plain, "data", 1)["memory_gb"]
    shrunk = predict(zero3, "data", 64)["memory_gb"] - predict(plain, "data", 64)["memory_gb"]
    assert shrunk == pytest.approx(-16 * params * (1 - 1 / 64) / 1e9)
    assert not predict(plain, "data", 512)["fits"] and predict(zero3, "data", 512)["fits"]


@pytest.mark.parametrize(("save", "load"), [(2, 3), (3, 1)])
def test_sharded_checkpoint_reloads_bit_equal_on_another_world(save, load):
    """~8 s each: FSDP2 shards saved by DCP on `save` ranks, read back on `load` ranks into a
    model built from another seed; beside it the one-file checkpoint of the same content."""
    res = experiments.run(
        "sharded-checkpoint", save_ranks=save, load_ranks=load, width=64, depth=3, steps=2
    )
    sharded, single = res.records
    assert sharded["bit_equal"] and sharded["max_abs_diff"] == 0.0 and sharded["adam_bit_equal"]
    assert sharded["files"] == save + 1  # one file per saving rank + .metadata
    for rec in res.records:  # both hold weights + Adam's two moments, fp32 (+ small metadata)
        assert 12 * rec["params"] < rec["bytes"] < 1.3 * 12 * rec["params"]


def test_the_probe_counts_new_storages_at_their_live_size():
    """The peak is the state alive at the start plus what the step allocates, counted while it
    lives: a view of an existing tensor adds nothing, a freed temporary stops counting, and a
    storage resized to 0 bytes (how FSDP2 frees a gathered parameter) counts 0."""
    from hpclab.parallel.tensor_parallel import CommTally
    from hpclab.sharding.probe import StepProbe

    data = torch.zeros(1 << 20)  # 4 MiB existing before the probe, not part of the state
    state = torch.zeros(1 << 10)  # 4 KiB of state
    with StepProbe(CommTally(), [state]) as probe:
        batch = data[:256] * 1  # a view (nothing new), then a 1 KiB result
        tmp = torch.ones(1 << 18)  # 1 MiB, freed below
        del tmp
        big = torch.ones(1 << 17)  # 512 KiB
        big.untyped_storage().resize_(0)
        after = torch.ones(1 << 16)  # 256 KiB: resized storage no longer counts
    assert probe.peak == 4096 + 1024 + (1 << 20)
    assert probe.now == 4096 + 1024 + (1 << 18)
    assert batch.numel() == 256 and after.numel() == 1 << 16
