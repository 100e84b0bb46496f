"""Chapter 01 on a GPU: peaks from the datasheet, TF32 switch, memory guard, async timing."""

from __future__ import annotations

import pytest
import torch

from hpclab import experiments
from hpclab.config import ConfigError

pytestmark = pytest.mark.gpu


def _live(result):
    return [r for r in result.records if r.get("tier") == "live"]


def test_gemm_on_gpu_uses_datasheet_peak_and_cuda_events():
    from hpclab.compute.device import peak_gflops

    res = experiments.run(
        "gemm", device="cuda", compare_devices=False, size=(4096,), dtype=("bf16", "fp32"), repeat=5
    )
    for r in _live(res):
        peak, source = peak_gflops("cuda:0", r["dtype"])
        if peak:
            assert r["peak_gflops"] == pytest.approx(peak) and "datasheet" in r["peak_source"]
            assert 0.05 < r["peak_fraction"] < 1.05
        assert r["seconds"] > 0 and r["threads"] is None
    bf16 = next(r for r in _live(res) if r["dtype"] == "bf16")
    fp32 = next(r for r in _live(res) if r["dtype"] == "fp32")
    assert bf16["gflops"] > 2 * fp32["gflops"]  # tensor cores vs fp32 CUDA cores


def test_tf32_mode_is_restored_and_faster_than_fp32():
    if torch.cuda.get_device_capability()[0] < 8:
        pytest.skip("TF32 needs Ampere or newer")
    before = torch.backends.cuda.matmul.allow_tf32
    res = experiments.run(
        "gemm", device="cuda", compare_devices=False, size=(4096,), dtype=("fp32", "tf32"), repeat=5
    )
    assert torch.backends.cuda.matmul.allow_tf32 == before
    by = {r["dtype"]: r["gflops"] for r in _live(res)}
    assert by["tf32"] > 1.5 * by["fp32"]


def test_gpu_memory_guard_names_free_memory():
    from hpclab.compute import device as dev
    from hpclab.compute.gemm_sweep import _guard

    free, _ = torch.cuda.mem_get_info()
    with pytest.raises(ConfigError, match=r"GiB on cuda:0, but only .* GiB are available"):
        dev.ensure_fits(2 * free, "cuda:0", "twice the free memory")
    # fp64 GEMM: ~32 n^2 bytes on the device (A, B, C and the fp64 check copy), 8 n^2 on the host
    n = int(1.1 * (free / 32) ** 0.5)
    with pytest.raises(ConfigError, match=r"on cuda:0"):
        _guard(n, n, n, "fp64", "cuda:0")


def test_crossover_on_gpu_shows_the_async_lie():
    res = experiments.run(
        "crossover", compare_devices=True, ops=("matmul",), matmul_sizes=(16, 4096), repeat=3
    )
    big = next(r for r in _live(res) if r["device"] == "cuda:0" and r["size"] == 4096)
    assert big["seconds_nosync"] < 0.5 * big["seconds"]  # the clock stopped at the launch
    cross = [r for r in res.records if r["kind"] == "crossover"]
    assert cross and cross[0]["tier"] == "live"


def test_ops_reports_cudnn_benchmark_both_ways_and_speedups():
    res = experiments.run("ops", compare_devices=True, elements=2**20, batch=8, repeat=3)
    conv = [r for r in _live(res) if r["op"] == "conv" and r["device"] == "cuda:0"]
    assert {r["cudnn_benchmark"] for r in conv} == {False, True}
    assert all(r["speedup_vs_cpu"] > 0 for r in conv)


def test_timer_check_catches_a_missing_synchronize():
    import statistics
    import time

    from hpclab.check import compute as C

    def no_sync(fn, device="cpu", warmup=2, repeat=10):
        for _ in range(warmup):
            fn()
        samples = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples)

    bad = C.timer(no_sync, device="cuda")
    assert not bad and "synchronize" in bad.message
    bad = C.timer(no_sync)  # the notebook's call, with no device: tried on the GPU as well
    assert not bad and "on this GPU" in bad.message and "synchronize" in bad.message
    from hpclab.compute.timers import honest_time

    assert C.timer(lambda fn, device, warmup, repeat: honest_time(fn, repeat, device), "cuda")


def test_train_throughput_on_gpu():
    res = experiments.run(
        "train-throughput",
        device="cuda",
        compare_devices=False,
        batch_size=(256,),
        steps=10,
        references=False,
    )
    (r,) = _live(res)
    assert r["device"] == "cuda:0" and r["samples_per_s"] > 0
