"""Model FLOPs utilisation (chapter 01): the formula, its peak, and the records that carry it."""

from __future__ import annotations

import pytest

from hpclab.compute import device as dev
from hpclab.compute.mfu import mfu, mfu_fields


def test_mfu_is_model_flops_rate_over_peak():
    assert mfu(1e9, 100.0, 200.0) == pytest.approx(0.5)  # 100 GFLOP/s of a 200 GFLOP/s peak
    assert mfu(1e9, 100.0, None) is None  # no peak known: no MFU, never a made-up one
    with pytest.raises(ValueError, match="samples_per_s=-1"):
        mfu(1e9, -1, 200.0)


def test_cpu_peak_counts_each_ranks_threads_up_to_the_physical_cores():
    one, _ = dev.peak_gflops("cpu", "fp32", 1)
    allc, _ = dev.peak_gflops("cpu", "fp32", None)
    f = mfu_fields(4e6, 1000.0, "cpu", threads=1)
    assert f["peak_gflops"] == pytest.approx(one) and "measured" in f["mfu_peak"]
    assert f["model_gflops"] == pytest.approx(4.0)
    assert f["mfu"] == pytest.approx(4.0 / one)
    # 64 ranks x 1 thread on this allocation: the peak stops at its physical cores
    assert mfu_fields(4e6, 1000.0, "cpu", threads=1, devices=64)["peak_gflops"] == allc


def test_gpu_peak_is_the_datasheet_times_the_gpus(monkeypatch):
    monkeypatch.setattr(dev, "device_name", lambda device: "NVIDIA H100 80GB HBM3")
    f = mfu_fields(6e12, 100.0, "cuda:0", devices=8, dtype="bf16")
    assert f["peak_gflops"] == pytest.approx(8 * 989.4e3)  # H100 SXM bf16 dense, 8 GPUs
    assert f["mfu"] == pytest.approx(600e3 / (8 * 989.4e3))
    assert f["mfu_peak"].startswith("8 GPUs x H100 SXM bf16")


def test_train_throughput_records_carry_mfu_and_a_gemm_beside_it():
    from hpclab import experiments

    res = experiments.run(
        "train-throughput", model="tiny", data="digits", batch_size=(64,), threads=(1,),
        device="cpu", steps=3, references=False,
    )  # fmt: skip
    (r,) = res.records
    # tiny MLP 64-128-10: forward 2x(64x128 + 128x10), the same for the weight gradients, and
    # the second layer's input gradient 2x128x10 (the first layer's input needs none)
    assert r["flops_per_sample"] == 2 * (64 * 128 + 128 * 10) * 2 + 2 * 128 * 10
    peak, _ = dev.peak_gflops("cpu", "fp32", 1)
    assert r["mfu"] == pytest.approx(r["flops_per_sample"] * r["samples_per_s"] / (peak * 1e9))
    assert 0 < r["mfu"] < 1
    assert r["gemm_gflops"] > 0 and r["gemm_fraction"] == pytest.approx(r["gemm_gflops"] / peak)


# --- the exercise's check (chapter 01 (g)) ----------------------------------------------------

CASE = (9.6e6, 1800.0, 396.0)


def test_mfu_check_accepts_the_solution_and_the_library():
    from hpclab.check import speed

    assert speed.mfu(lambda f, s, p: f * s / (p * 1e9), *CASE).passed
    assert speed.mfu(mfu, *CASE).passed


@pytest.mark.parametrize(
    "wrong, advice",
    [
        (lambda f, s, p: f * s / p, "1e9"),
        (lambda f, s, p: 100 * f * s / (p * 1e9), "percentage"),
        (lambda f, s, p: p * 1e9 / (f * s), "achieved / peak"),
        (lambda f, s, p: f * s / (p * 1e9) / 3, "do not divide by 3"),
        (lambda f, s, p: f / s / (p * 1e9), "you divided"),
    ],
)
def test_mfu_check_rejects_each_slip_with_its_advice(wrong, advice):
    from hpclab.check import speed

    r = speed.mfu(wrong, *CASE)
    assert not r.passed and advice in r.message


def test_mfu_check_wants_a_function_and_says_what_it_expected():
    from hpclab.check import speed

    assert "pass your function" in speed.mfu(0.02, *CASE).message
    r = speed.mfu(lambda f, s, p: 0.5, *CASE)
    assert not r.passed and "expected" in r.message
