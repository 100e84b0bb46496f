"""Chapter 01 library: FLOP and byte counts, peaks, thread handling, memory guards, timers."""

from __future__ import annotations

import math
import time

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from hpclab.compute import device as dev
from hpclab.compute import flops as F
from hpclab.config import ConfigError


def _counted(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return counter.get_total_flops()


def test_gemm_flops_match_torch_flop_counter():
    a, b = torch.randn(7, 5), torch.randn(5, 3)
    assert F.gemm_flops(7, 3, 5) == _counted(lambda: a @ b) == 210


def test_alexnet_conv2_flops_match_torch_flop_counter():
    p = F.ALEXNET_CONV2
    x = torch.randn(2, p["c_in"], p["h"], p["w"])
    w = torch.randn(p["c_out"], p["c_in"] // p["groups"], 5, 5)
    conv = lambda: torch.nn.functional.conv2d(x, w, padding=2, groups=2)  # noqa: E731
    want = F.conv2d_flops(2, 96, 27, 27, 256, 5, 1, 2, 2)
    assert want == _counted(conv) == 2 * 2 * 256 * 27 * 27 * 48 * 25
    strided = lambda: torch.nn.functional.conv2d(x, w, stride=2, groups=2)  # noqa: E731
    assert F.conv2d_flops(2, 96, 27, 27, 256, 5, 2, 0, 2) == _counted(strided)


def test_intensity_and_roofline():
    g = F.gemm(1024, 1024, 1024, itemsize=4)
    assert g.intensity == pytest.approx(2 * 1024 / (3 * 4))  # 2n^3 / (3 n^2 s)
    assert F.elementwise(1000).intensity == pytest.approx(1 / 12)
    assert F.softmax(10, 100).intensity == pytest.approx(5 / 8)
    assert F.ridge_point(200.0, 20.0) == 10.0
    assert F.attainable_gflops(1 / 12, 200.0, 24.0) == pytest.approx(2.0)
    assert F.attainable_gflops(100.0, 200.0, 24.0) == 200.0
    assert F.bound(9.9, 200.0, 20.0) == "memory" and F.bound(10.1, 200.0, 20.0) == "compute"
    assert F.fft_flops(1024, 3) == 5 * 1024 * 10 * 3


def test_cpu_peak_is_threads_times_clock_times_flops_per_cycle():
    from hpclab.measure.sysinfo import system_info

    info = system_info()
    if not info["clock_ghz"]:
        pytest.skip("no clock on this machine")
    for dtype in ("fp64", "fp32", "bf16"):
        one, text = dev.peak_gflops("cpu", dtype, 1)
        assert one == pytest.approx(info["clock_ghz"] * info["flops_per_cycle"][dtype])
        three, _ = dev.peak_gflops("cpu", dtype, 3)  # threads beyond the cores add no peak
        assert three == pytest.approx(min(3, info["cores_physical"]) * one)
        assert "FLOP/cycle" in text and f"{one:.1f}" in text
    assert dev.peak_gflops("cpu", "fp64", 1)[0] == pytest.approx(
        dev.peak_gflops("cpu", "fp32", 1)[0] / 2
    )


def test_gpu_datasheet_peaks_and_reference_rows():
    spec = dev.gpu_reference("H100 SXM")
    assert spec["spec"] == "H100 SXM" and spec["bf16"] == 989.4 and spec["mem_bw_gbps"] == 3350
    assert dev.gpu_reference("A100 SXM 80GB")["spec"] == "A100 SXM 80GB"


def test_torch_threads_sets_and_restores():
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with dev.torch_threads(2) as n:
            assert n == 2 and torch.get_num_threads() == 2
        assert torch.get_num_threads() == 1
        with pytest.raises(RuntimeError), dev.torch_threads(2):
            raise RuntimeError("boom")
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(old)


def test_ensure_fits_refuses_with_size_and_available():
    avail = dev.available_bytes("cpu")
    dev.ensure_fits(1024, "cpu", "a tiny array")
    with pytest.raises(ConfigError, match=r"needs .* GiB on cpu, but only .* GiB are available"):
        dev.ensure_fits(2 * avail, "cpu", "a huge array")


def test_devices_and_dtypes():
    assert dev.resolve_devices("cpu") == ["cpu"]
    assert dev.resolve_devices("auto", compare=True)[0] == "cpu"
    assert len(dev.resolve_devices("auto", compare=True)) == 1 + dev.gpu_count()
    if dev.gpu_count() == 0:
        with pytest.raises(ConfigError, match="no GPU is visible"):
            dev.resolve_devices("cuda")
    assert "tensor-core" in dev.unsupported("cpu", "tf32")
    assert dev.unsupported("cpu", "bf16") is None
    assert dev.canonical_dtype("float32") == "fp32" and dev.canonical_dtype("bf16") == "bf16"


def test_time_matmul_checks_and_counts():
    from hpclab.compute.gemm import _check_against_fp64, time_gemm, time_matmul

    t = time_matmul(64, 32, 16, "fp32", repeat=3)
    assert t.flops == 2 * 64 * 32 * 16
    assert t.gflops == pytest.approx(t.flops / t.timing.median_s / 1e9)
    assert t.gflops_best >= t.gflops
    assert t.timing.inner >= 1
    g = time_gemm(32, "fp64", repeat=2)  # chapter 00's API keeps working
    assert g.size == 32 and g.gflops > 0
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    check = _check_against_fp64(a, b, "fp32")
    check(a @ b)
    with pytest.raises(AssertionError, match="relative error"):
        check(a @ b + 0.01 * (a @ b).abs().max())


def test_stream_kernels_compute_the_right_values():
    from hpclab.compute.bandwidth import KERNELS, Q, stream_fn

    for kernel in KERNELS:
        a, b, c = torch.full((5,), 1.0), torch.full((5,), 2.0), torch.full((5,), 0.5)
        out = stream_fn(kernel, a, b, c)()
        want = {"copy": 1.0, "scale": Q * 1.0, "add": 3.0, "triad": 2.0 + Q * 0.5}[kernel]
        assert torch.all(out == want), kernel


def test_measure_stream_bytes_and_rate():
    from hpclab.compute.bandwidth import measure_stream

    r = measure_stream("add", 1 << 16, repeat=3)
    assert r["bytes_per_call"] == 3 * 4 * (1 << 16)
    assert r["flops_per_call"] == 1 << 16
    assert r["gbps"] == pytest.approx(r["bytes_per_call"] / r["seconds"] / 1e9)


def test_crossover_model_algebra():
    from hpclab.compute.crossover import crossover_work, fit_latency_rate, size_of, work_of

    # cpu: 1 us + w / 1e11; gpu: 10 us + w / 1e13 -> w* = 9e-6 / (1e-11 - 1e-13)
    w = crossover_work(1e-6, 1e11, 10e-6, 1e13)
    assert w == pytest.approx(9e-6 / (1e-11 - 1e-13))
    assert size_of("matmul", work_of("matmul", 300)) == pytest.approx(300)
    assert size_of("add", work_of("add", 4096)) == pytest.approx(4096)
    assert crossover_work(1e-6, 1e11, 1e-6, 1e12) == 0.0  # never slower
    assert math.isinf(crossover_work(1e-6, 1e12, 1e-5, 1e11))  # never faster
    works = [1e3, 1e5, 1e7, 1e9]
    lat, rate = fit_latency_rate(works, [2e-6 + x / 5e10 for x in works])
    assert lat == pytest.approx(2e-6, rel=1e-6) and rate == pytest.approx(5e10, rel=1e-6)


def test_a_latency_only_fit_says_so_and_prints_no_unbounded_rate():
    """The H200 run of chapter 01: the GPU's time per matmul stayed ~20 us from n=8 to 512."""
    from hpclab.compute.crossover import fits_and_crossovers, work_of

    sizes = (8, 32, 128, 512)
    cpu = [1e-6 + work_of("matmul", n) / 1e11 for n in sizes]
    gpu = [20e-6, 20.1e-6, 19.9e-6, 20.05e-6]  # flat: launch latency only
    pts = [
        {"kind": "point", "op": "matmul", "device": d, "size": n, "work": work_of("matmul", n),
         "seconds": t}
        for d, ts in (("cpu", cpu), ("cuda:0", gpu)) for n, t in zip(sizes, ts, strict=True)
    ]  # fmt: skip
    rows = {(r["kind"], r["device"]): r for r in fits_and_crossovers(pts)}
    fit = rows[("fit", "cuda:0")]
    assert fit["latency_s"] == pytest.approx(20e-6, rel=0.02)
    assert fit["rate_per_s"] is None and fit["note"].startswith("rate not determined")
    assert rows[("fit", "cpu")]["rate_per_s"] == pytest.approx(1e11, rel=0.01)
    assert rows[("fit", "cpu")]["note"] == ""
    cross = rows[("crossover", "cuda:0")]
    assert cross["predicted_size"] is None and "cuda:0 found no rate" in cross["note"]
    assert cross["measured_size"] == 128  # what the data show: the GPU wins from n=128
    numbers = [v for r in rows.values() for v in r.values() if isinstance(v, float)]
    assert all(math.isfinite(v) and v < 1e15 for v in numbers)


def test_measured_crossover_is_the_stable_one():
    from hpclab.compute.crossover import _measured_crossover

    pts = [{"op": "add", "device": d, "size": s, "seconds": t} for d, s, t in [
        ("cpu", 1, 1.0), ("cpu", 2, 2.0), ("cpu", 3, 3.0), ("cpu", 4, 4.0),
        ("g", 1, 0.5), ("g", 2, 2.5), ("g", 3, 2.0), ("g", 4, 1.0)]]  # fmt: skip
    assert _measured_crossover(pts, "add", "g") == 3


def test_naive_and_honest_timers_agree_on_a_cpu():
    from hpclab.compute.timers import honest_time, naive_time

    # the same signature; on a CPU (synchronous) neither stops its clock before the work ends:
    # both see the whole 3 ms sleep (how close they are is a benchmark's question, not a test's)
    def fn():
        time.sleep(0.003)

    naive, honest = naive_time(fn, repeat=5), honest_time(fn, repeat=5)
    assert naive >= 0.003 and honest >= 0.003


def test_a_gpu_runs_larger_crossover_sizes_so_its_rate_shows():
    from hpclab.compute.crossover import CrossoverConfig, _sizes

    cfg = CrossoverConfig.create(matmul_sizes=(8, 512))
    assert _sizes(cfg, "matmul", "cpu") == [8, 512]
    assert _sizes(cfg, "matmul", "cuda:0") == [8, 512, 2048, 4096]
