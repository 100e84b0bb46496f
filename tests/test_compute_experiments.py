"""Chapter 01 experiments end to end, small: records, units, references, CLI, widget panel."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from hpclab import experiments
from hpclab.config import ConfigError
from hpclab.progress import Cancelled, Progress


def _live(result):
    return [r for r in result.records if r.get("tier") == "live"]


def test_gemm_records_carry_peak_and_fraction():
    from hpclab.compute.device import peak_gflops

    old = torch.get_num_threads()
    res = experiments.run("gemm", size=(32, 64), dtype=("fp32", "fp64"), threads=(1,), repeat=2)
    assert torch.get_num_threads() == old  # restored
    live = _live(res)
    assert len(live) == 4 and {r["threads"] for r in live} == {1}
    for r in live:
        flops = 2 * r["size"] ** 3
        assert r["gflops"] == pytest.approx(flops / r["seconds"] / 1e9)
        assert r["peak_gflops"] == pytest.approx(peak_gflops("cpu", r["dtype"], 1)[0])
        assert r["peak_fraction"] == pytest.approx(r["gflops"] / r["peak_gflops"])
        assert "FLOP/cycle" in r["peak_source"]
    refs = [r for r in res.records if r.get("tier") == "reference"]
    h100 = next(r for r in refs if r["device"] == "NVIDIA H100 SXM")
    assert h100["gflops"] == 794.5e3 and h100["peak_fraction"] == pytest.approx(794.5 / 989)
    assert "ml-engineering" in h100["source"]
    experiments.get("gemm").plot(res)


def test_gemm_peak_table_has_a_row_per_series_gpu_included():
    """Chapter 01's % of peak table. A GPU series has no thread count (None in its records): an
    H100 run of the chapter failed where the table cast threads to int."""
    from types import SimpleNamespace

    from hpclab.compute.gemm_sweep import peak_table

    res = experiments.run("gemm", size=(32, 64), dtype=("fp32",), threads=(1, 2), repeat=2)
    live = [r for r in _live(res) if r["kind"] == "square"]
    gpu = [{**r, "device": "cuda", "dtype": "bf16", "threads": None} for r in live[:2]]
    table = peak_table(SimpleNamespace(records=res.records + gpu))
    assert list(table.index) == ["cpu fp32, 1 thread", "cpu fp32, 2 threads", "cuda bf16"]
    assert list(table.columns) == [32, 64]
    one = next(r for r in live if r["threads"] == 1 and r["size"] == 64)
    assert table.loc["cpu fp32, 1 thread", 64] == pytest.approx(100 * one["peak_fraction"])


def test_gemm_shape_sweep_reports_the_best_shape():
    res = experiments.run(
        "gemm",
        size=(16, 48),
        dtype=("fp32",),
        threads=(1,),
        repeat=2,
        shapes=True,
        references=False,
    )
    live = _live(res)
    shapes = [r for r in live if r["kind"] in ("square", "shape")]
    assert len(shapes) == 8  # every (m, n, k) from {16, 48}^3
    (best,) = [r for r in live if r["kind"] == "max_achievable"]
    assert best["gflops"] == max(r["gflops"] for r in shapes)


def test_gemm_refuses_before_allocating():
    # the config's own check refuses it (an allocation would have failed differently, or
    # swapped): the message names the size and the memory it needs
    with pytest.raises(ConfigError, match=r"60000x60000 .* needs 1\d\d\.\d\d GiB on cpu"):
        experiments.run("gemm", size=(60000,), dtype=("fp64",))
    with pytest.raises(ConfigError, match="dtype=.tf32. on cpu: tf32 is a tensor-core mode"):
        experiments.run("gemm", size=(32,), dtype=("tf32",))
    # comparing devices skips what a device cannot do instead of failing the whole sweep
    res = experiments.run(
        "gemm", compare_devices=True, size=(32,), dtype=("tf32", "fp32"), threads=(1,), repeat=1
    )
    assert {(r["device"], r["dtype"]) for r in _live(res) if r["device"] == "cpu"} == {
        ("cpu", "fp32")
    }


def test_bandwidth_records_and_gpu_references():
    res = experiments.run(
        "bandwidth", array_mb=4, kernels=("copy", "triad"), threads=(1,), repeat=2
    )
    live = _live(res)
    assert [r["kernel"] for r in live] == ["copy", "triad"]
    n = 4 * 2**20 // 4
    assert live[0]["bytes_per_call"] == 2 * 4 * n and live[1]["bytes_per_call"] == 3 * 4 * n
    for r in live:
        assert r["gbps"] == pytest.approx(r["bytes_per_call"] / r["seconds"] / 1e9)
    refs = {r["device"]: r["peak_gbps"] for r in res.records if r.get("tier") == "reference"}
    assert refs["H100 SXM"] == 3350 and refs["V100 SXM2"] == 900
    experiments.get("bandwidth").plot(res)


def test_roofline_places_kernels_under_the_right_roof():
    res = experiments.run(
        "roofline", gemm_sizes=(16, 256), elements=2**22, conv_batch=1, repeat=2, threads=1
    )
    roofs = {(r["roof"], r["tier"]): r for r in res.records if r["kind"] == "roof"}
    bw = roofs[("memory", "live")]["gbps"]
    peak = roofs[("compute", "model")]["peak_gflops"]
    assert bw > 0 and peak > 0
    pts = {r["op"]: r for r in _live(res) if r["kind"] == "point" and r["op"] != "gemm"}
    assert pts["add"]["intensity"] == pytest.approx(1 / 12)
    assert pts["add"]["bound"] == "memory" and pts["softmax"]["bound"] == "memory"
    assert pts["conv"]["bound"] == "compute"  # ~273 FLOP/byte: right of any CPU's ridge
    for r in pts.values():
        assert r["attainable_gflops"] == pytest.approx(min(peak, bw * r["intensity"]))
    # the reference GPU: the same kernels under the H100's datasheet roofs (model tier)
    model = {r["op"]: r for r in res.records if r.get("tier") == "model" and r["kind"] == "point"}
    assert model["add"]["attainable_gflops"] == pytest.approx(3350 / 12)
    assert model["conv"]["attainable_gflops"] == pytest.approx(67e3)
    experiments.get("roofline").plot(res)


def test_ops_records_units_and_seed_speedups():
    res = experiments.run(
        "ops", device="cpu", compare_devices=False, elements=2**14, batch=1, repeat=2, threads=1
    )
    live = {(r["op"], r["variant"]): r for r in _live(res)}
    assert set(live) == {
        ("rng", "randn"),
        ("rng", "rand"),
        ("fft", "c2c length 4096"),
        ("conv", "forward"),
        ("pool", "max 3x3 stride 2"),
    }
    conv = live[("conv", "forward")]
    assert conv["work"] == 2 * 256 * 27 * 27 * 48 * 25
    assert conv["gflops"] == pytest.approx(conv["work"] / conv["seconds"] / 1e9)
    fft = live[("fft", "c2c length 4096")]
    assert fft["work"] == 5 * 4 * 4096 * 12  # 4 transforms of 4096 points
    refs = {r["op"]: r["speedup_vs_cpu"] for r in res.records if r.get("tier") == "reference"}
    assert refs == {"rng": 70, "gemm": 6, "conv": 1.9, "pool": 2.7}
    experiments.get("ops").plot(res)


def test_crossover_without_gpu_uses_a_labelled_model(small_crossover):
    from hpclab.compute.crossover import crossover_tables

    res = small_crossover
    model = [r for r in res.records if r.get("tier") == "model" and r["kind"] == "point"]
    assert model and all("assumed" in r["source"] for r in model)
    add = next(r for r in model if r["op"] == "add" and r["size"] == 65536)
    assert add["seconds"] == pytest.approx(10e-6 + 12 * 65536 / 3350e9)
    cross = {r["op"]: r for r in res.records if r["kind"] == "crossover"}
    assert set(cross) == {"matmul", "add"} and cross["add"]["tier"] == "model"
    fits = {(r["op"], r["device"]): r for r in res.records if r["kind"] == "fit"}
    assert fits[("add", "H100 SXM (model)")]["latency_s"] == pytest.approx(10e-6, rel=1e-3)
    lines, sizes = crossover_tables(res)  # chapter 01's two tables: µs and G/s, then the sizes
    assert lines.loc[("add", "H100 SXM (model)"), "latency_us"] == pytest.approx(10, rel=1e-3)
    cpu_add = fits[("add", "cpu")]
    assert lines.loc[("add", "cpu"), "rate_g_per_s"] == pytest.approx(cpu_add["rate_per_s"] / 1e9)
    assert list(sizes.columns) == ["predicted_size", "measured_size"]
    assert set(sizes.index) == {("matmul", "H100 SXM (model)"), ("add", "H100 SXM (model)")}
    experiments.get("crossover").plot(res)


def test_train_throughput_learns_and_compares_with_guan2019():
    res = experiments.run(
        "train-throughput",
        model="tiny",
        data="digits",
        batch_size=(64,),
        threads=(1,),
        steps=30,
        lr=0.5,
    )
    (r,) = _live(res)
    assert r["samples_per_s"] == pytest.approx(64 / r["seconds"])
    assert r["parameters"] == 64 * 128 + 128 + 128 * 10 + 10
    assert r["loss_last"] < 0.8 * r["loss_first"]  # it trains: the step is a real SGD step
    from hpclab.compute.throughput import speedups

    guan = {
        (s["batch_size"], s["threads"]): s["speedup"] for s in speedups(res.records, "reference")
    }
    assert guan[(256, 16)] == pytest.approx(11193.94 / 2559.46)
    assert guan[(50, 32)] < guan[(50, 16)]  # the deck's point: 32 threads slower than 16
    experiments.get("train-throughput").plot(res)


def test_cancel_raises_between_units():
    p = Progress()
    p.cancel()
    with pytest.raises(Cancelled):
        experiments.run("gemm", progress=p, size=(32,), dtype=("fp32",), repeat=1)


def test_cli_json_and_bad_arguments():
    cmd = [sys.executable, "-m", "hpclab.cli", "run", "gemm", "--device", "cpu"]
    cmd += ["--no-compare-devices"]
    out = subprocess.run(
        cmd + ["--dtype", "float32", "--size", "64", "--threads", "1", "--repeat", "2", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    (rec,) = [r for r in data["records"] if r["tier"] == "live"]
    assert rec["dtype"] == "fp32" and rec["threads"] == 1
    assert {"gflops", "peak_gflops", "peak_fraction"} <= set(rec)
    bad = subprocess.run(cmd + ["--size", "99999999"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().count("\n") == 0 and "size=99999999" in bad.stderr


def test_widget_panel_runs_and_survives_cancel():
    pytest.importorskip("ipywidgets")
    from hpclab.widgets import panel

    p = panel(
        "gemm",
        fields=("size", "threads"),
        fixed={"dtype": ("fp32",), "repeat": 1, "references": False},
        accumulate=True,
        run_now=False,
    )
    p.controls["size"].value = "32"
    p.controls["threads"].value = "1"
    p.start(wait=True)
    assert "done" in p.status.value and len(p.figure.data) >= 1
    p.controls["size"].value = "1024,1024,1024,1024"
    p.start()
    p.cancel()
    p._thread.join(60)
    assert not p.run_button.disabled and p.cancel_button.disabled
    p.controls["size"].value = "48"
    p.start(wait=True)
    assert "done" in p.status.value
    sizes = {r["size"] for res in p.results for r in res.records}
    assert {32, 48} <= sizes  # accumulate=True keeps the earlier run's points


def test_chapter_01_shows_every_device_by_default(monkeypatch):
    """Every chapter-01 experiment compares devices by default: the CPU alone here, the CPU and
    each GPU on a GPU node (GPU visibility and its NVML facts patched; nothing runs on a GPU)."""
    from hpclab.compute import device as dev
    from hpclab.compute.bandwidth import BandwidthConfig
    from hpclab.compute.crossover import CrossoverConfig
    from hpclab.compute.gemm_sweep import GemmConfig, _plan, _shapes
    from hpclab.compute.ops import OpsConfig
    from hpclab.compute.roofline import RooflineConfig
    from hpclab.compute.throughput import ThroughputConfig

    configs = (BandwidthConfig, CrossoverConfig, GemmConfig, OpsConfig, RooflineConfig,
               ThroughputConfig)  # fmt: skip
    defaults = {c.__name__: (c.create().device, c.create().compare_devices) for c in configs}
    assert set(defaults.values()) == {("auto", True)}, defaults
    monkeypatch.setattr(dev, "gpu_count", lambda: 0)
    assert [c.create().devices() for c in configs] == [["cpu"]] * len(configs)
    assert GemmConfig.create(compare_devices=False).devices() == ["cpu"]  # auto: the CPU here
    monkeypatch.setattr(dev, "gpu_count", lambda: 2)
    monkeypatch.setattr(dev, "gpu_facts", lambda d: {"name": "NVIDIA H200", "capability": "9.0"})
    assert dev.resolve_devices("auto", compare=True) == ["cpu", "cuda:0", "cuda:1"]
    cfg = GemmConfig.create(dtype=("fp32", "bf16"), size=(512, 1024))
    assert [(d, t) for d, t, _ in _plan(cfg)] == [
        ("cpu", "fp32"), ("cpu", "bf16"), ("cuda:0", "fp32"), ("cuda:0", "bf16"),
        ("cuda:1", "fp32"), ("cuda:1", "bf16"),
    ]  # fmt: skip
    assert [s[0] for s in _shapes(cfg, "cuda:0")] == [512, 1024, 4096, 8192]  # the full curve
    assert [s[0] for s in _shapes(cfg, "cpu")] == [512, 1024]


def test_device_all_is_refused_naming_compare_devices():
    """ "all" was chapter 01's word for comparing; it is no device: every way in (a config, the
    device helper, the CLI) refuses it in one line that names the option that replaced it."""
    from hpclab.compute import device as dev
    from hpclab.compute.roofline import RooflineConfig

    for make in (
        lambda: RooflineConfig.create(device="all"),
        lambda: experiments.run("gemm", device="all", compare_devices=False),
        lambda: dev.resolve_devices("all", compare=True),
    ):
        with pytest.raises(ConfigError) as err:
            make()
        assert "\n" not in str(err.value)
        assert "device='all' is not a device" in str(err.value)
        assert "compare_devices=True (--compare-devices)" in str(err.value)
    out = subprocess.run(
        [sys.executable, "-m", "hpclab.cli", "run", "ops", "--device", "all"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and out.stdout == "", out.stderr
    assert out.stderr.strip().count("\n") == 0 and "--compare-devices" in out.stderr


def test_a_named_device_is_measured_alone_and_compare_runs_the_cpu_here():
    """device='cpu' (``--device cpu``) measures the CPU alone whatever compare_devices says;
    with 0 GPUs (this machine) comparing gives the CPU rows only."""
    from hpclab.compute.device import DevicesConfig

    assert DevicesConfig(device="cpu").devices() == ["cpu"]
    assert DevicesConfig(device="cpu", compare_devices=False).devices() == ["cpu"]
    from hpclab.compute.device import gpu_count

    res = experiments.run(
        "gemm", size=(32,), dtype=("fp32",), threads=(1,), repeat=1, references=False
    )  # compare_devices=True, the default
    gpus = {f"cuda:{i}" for i in range(gpu_count())}  # none on CI: the CPU rows only
    assert {r["device"] for r in _live(res)} == {"cpu"} | gpus
    assert res.config["compare_devices"] is True and res.config["device"] == "auto"


def test_gemm_references_include_this_courses_h200_run_per_dtype():
    from hpclab.compute.gemm_sweep import plot_gemm, reference_records
    from hpclab.results import load_reference, make_result

    ours = [r for r in reference_records() if "this course" in r["device"]]
    run = {(r["dtype"], r["size"]): r for r in load_reference("h200_gemm").records}
    assert {r["dtype"] for r in ours} == {"bf16", "tf32", "fp32"}
    for r in ours:
        assert r["peak_fraction"] == run[(r["dtype"], 8192)]["peak_fraction"]
        assert r["gflops"] == pytest.approx(r["peak_fraction"] * r["peak_gflops"])
    bars = plot_gemm(make_result("gemm", {}, reference_records())).data[-1]
    labels = [y for y in bars.y if "this course" in y]
    assert sorted(labels) == sorted(f"{r['device']} {r['dtype']} (ref)" for r in ours)
