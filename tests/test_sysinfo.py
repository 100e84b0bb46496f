"""Chapter 00: the clock, usable cores, peaks and the GPU table tell the truth."""

from __future__ import annotations

import json
import os
import platform
import sys

import pytest

from hpclab.measure import clock, sysinfo
from hpclab.measure.clock import measure_clock_ghz
from hpclab.measure.peaks import cpu_peaks, flops_per_cycle, gpu_peak_tflops

X86_LINUX = sys.platform == "linux" and platform.machine().lower() in ("x86_64", "amd64")


def _fpc(flags: str, vendor: str = "", model: str = "", family: int | None = None) -> dict:
    return {k: v[0] for k, v in flops_per_cycle(flags.split(), vendor, model, family).items()}


# --- clock ------------------------------------------------------------------------------------
def test_loop_code_jumps_back_to_loop_start():
    code = clock._loop_code(64)
    head = b"\xf3\x0f\x1e\xfa" + b"\xba\x01\x00\x00\x00" + b"\x31\xc0"  # endbr64; rdx=1; rax=0
    assert code.startswith(head) and code[-1:] == b"\xc3"
    assert code[len(head) : len(head) + 3] == b"\x48\x01\xd0"  # add rax, rdx (reg-reg)
    rel = int.from_bytes(code[-5:-1], "little", signed=True)
    assert len(code) - 1 + rel == len(head)  # the jnz ends just before ret; target = first add


def test_clock_is_plausible():
    ghz, method = measure_clock_ghz()
    if X86_LINUX:
        assert method.startswith("measured"), method
    if ghz is None:
        pytest.skip(f"no clock here: {method}")
    assert 0.5 <= ghz <= 6.0, (ghz, method)


@pytest.mark.skipif(not X86_LINUX, reason="the add-chain loop runs on Linux x86-64 only")
def test_clock_agrees_with_second_measurement_and_max_freq():
    first, _ = measure_clock_ghz()
    second, method = clock._measure_loop_ghz(repeats=3, k=16)  # other K, uncached
    assert first and second, method
    assert abs(second - first) / first < 0.25, (first, second)
    max_freq = clock.read_text("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    if max_freq:  # kHz; acpi-cpufreq lists the base clock as max, so boost may exceed it a bit
        assert 0.25 < first / (int(max_freq) / 1e6) < 1.6, (first, max_freq)


def test_clock_never_runs_code_off_x86(monkeypatch):
    monkeypatch.setattr(clock.platform, "machine", lambda: "aarch64")
    ghz, method = clock._measure_loop_ghz()
    assert ghz is None and "aarch64" in method
    ghz, method = measure_clock_ghz.__wrapped__()  # uncached: falls back, names the source
    assert not method.startswith("measured")
    assert ghz is None or ("cpuinfo" in method or "sysfs" in method or "lscpu" in method)


# --- usable cores -----------------------------------------------------------------------------
def test_usable_cores_honours_slurm(monkeypatch):
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    cores, sources = sysinfo.usable_cores(), sysinfo.core_limits()
    assert cores == 1 and sources["slurm_cpus_per_task"] == 1
    info = sysinfo.system_info(refresh=True)
    assert info["cores_usable"] == 1 and info["slurm"]["SLURM_CPUS_PER_TASK"] == "1"
    assert info["peak_gflops"]["fp32"] == pytest.approx(
        info["clock_ghz"] * info["flops_per_cycle"]["fp32"]
    )
    monkeypatch.delenv("SLURM_CPUS_PER_TASK")
    sysinfo.system_info(refresh=True)


def test_usable_cores_honours_affinity(monkeypatch):
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    cores, sources = sysinfo.usable_cores(), sysinfo.core_limits()
    assert cores == 1 and sources["affinity"] == 1 and sources["node"] == os.cpu_count()


def test_usable_cores_honours_cgroup_quota(monkeypatch):
    fake = {"/proc/self/cgroup": "0::/job\n", "/sys/fs/cgroup/job/cpu.max": "150000 100000\n"}
    monkeypatch.setattr(sysinfo, "read_text", fake.get)
    assert sysinfo._cgroup_cpus() == 1  # 1.5 cores of quota: one thread, never more
    fake["/sys/fs/cgroup/job/cpu.max"] = "max 100000\n"
    assert sysinfo._cgroup_cpus() is None
    fake["/sys/fs/cgroup/cpu.max"] = "300000 100000\n"  # a parent's limit binds the child
    assert sysinfo._cgroup_cpus() == 3
    fake["/sys/fs/cgroup/job/memory.max"] = str(4 * 2**30)  # e.g. sbatch --mem=4G
    fake["/sys/fs/cgroup/memory.max"] = "max"
    assert sysinfo.cgroup_mem_gb() == 4.0
    v1 = {"/proc/self/cgroup": "4:memory:/slurm/job_1\n2:cpu,cpuacct:/slurm/job_1\n0::/\n"}
    v1["/sys/fs/cgroup/memory/slurm/job_1/memory.limit_in_bytes"] = str(2 * 2**30)
    v1["/sys/fs/cgroup/memory/memory.limit_in_bytes"] = "9223372036854771712"
    v1["/sys/fs/cgroup/cpu,cpuacct/slurm/job_1/cpu.cfs_quota_us"] = "200000"
    v1["/sys/fs/cgroup/cpu,cpuacct/slurm/job_1/cpu.cfs_period_us"] = "100000"
    v1["/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us"] = "-1"
    v1["/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us"] = "100000"
    monkeypatch.setattr(sysinfo, "read_text", v1.get)
    assert sysinfo.cgroup_mem_gb() == 2.0 and sysinfo._cgroup_cpus() == 2


def _topology(root, cores: dict[int, tuple[int, int]]) -> str:
    """A fake sysfs CPU topology: logical CPU -> (package, core)."""
    for cpu, (pkg, core) in cores.items():
        d = root / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "physical_package_id").write_text(f"{pkg}\n")
        (d / "core_id").write_text(f"{core}\n")
    return str(root)


def test_physical_cores_count_smt_siblings_once(tmp_path, monkeypatch):
    # 2 packages x 2 cores x 2 threads; Linux numbers the second threads after the first ones
    smt = {c: (c // 2 % 2, c % 2) for c in range(8)}  # cpu4 is cpu0's sibling, ...
    sysfs = _topology(tmp_path, smt)
    assert sysinfo.physical_cores(range(8), sysfs) == 4
    assert sysinfo.physical_cores({0, 4}, sysfs) == 1  # two threads of one core
    assert sysinfo.physical_cores({0, 1}, sysfs) == 2
    assert sysinfo.physical_cores({0, 2}, sysfs) == 2  # core 0 of each package: not one core
    assert sysinfo.physical_cores({0, 9}, sysfs) is None  # no topology for cpu9
    # The allocation's physical cores: within the affinity set, at most the usable count
    monkeypatch.setattr(sysinfo, "CPU_SYSFS", sysfs)
    monkeypatch.setattr(sysinfo.os, "sched_getaffinity", lambda _pid: {0, 1, 4, 5})
    monkeypatch.setattr(sysinfo.os, "cpu_count", lambda: 8)
    monkeypatch.setattr(sysinfo, "_cgroup_cpus", lambda: None)
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    assert sysinfo.usable_cores() == 4 and sysinfo.usable_physical_cores() == 2
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    assert sysinfo.usable_physical_cores() == 1


def test_the_peak_counts_physical_cores(monkeypatch):
    monkeypatch.setattr(sysinfo, "usable_cores", lambda: 4)
    monkeypatch.setattr(sysinfo, "usable_physical_cores", lambda: 2)
    info = sysinfo.system_info(refresh=True)
    try:
        assert info["cores_usable"] == 4 and info["cores_physical"] == 2
        if info["clock_ghz"] is not None:
            fpc = info["flops_per_cycle"]["fp32"]
            assert info["peak_gflops"]["fp32"] == pytest.approx(2 * info["clock_ghz"] * fpc)
            assert info["peak_derivation"]["fp32"].startswith("2 cores x ")
    finally:
        monkeypatch.undo()
        sysinfo.system_info(refresh=True)


# --- peaks ------------------------------------------------------------------------------------
def test_peak_arithmetic_and_fp64_half():
    info = sysinfo.system_info()
    if info["clock_ghz"] is None:
        pytest.skip("no clock")
    for dtype, fpc in info["flops_per_cycle"].items():
        expect = info["cores_physical"] * info["clock_ghz"] * fpc
        assert info["peak_gflops"][dtype] == pytest.approx(expect)
        assert f"= {expect:.1f} GFLOP/s" in info["peak_derivation"][dtype]
    assert info["flops_per_cycle"]["fp64"] * 2 == info["flops_per_cycle"]["fp32"]


def test_derivation_reads_like_the_course():
    p = cpu_peaks(
        2, 3.65, "sse2 avx avx2 fma avx512f".split(), "AuthenticAMD", "AMD EPYC", family=25
    )
    assert p["fp32"]["gflops"] == pytest.approx(233.6)
    assert p["fp32"]["derivation"].startswith("2 cores x 3.65 GHz (measured) x 32 FLOP/cycle (")
    assert cpu_peaks(2, None, ["sse2"])["fp32"]["gflops"] is None


@pytest.mark.parametrize(
    ("flags", "vendor", "model", "family", "fp32", "bf16"),
    [
        ("sse2 avx avx2 fma", "GenuineIntel", "Intel(R) Xeon(R) CPU E5-2680 v4", 6, 32, 32),
        ("sse2 avx avx2 fma avx512f avx512_bf16", "AuthenticAMD", "AMD EPYC 9654", 25, 32, 64),
        ("sse2 avx avx2 fma avx512f", "AuthenticAMD", "AMD EPYC 9755", 26, 64, 64),
        ("sse2 avx avx2 fma avx512f", "GenuineIntel", "Intel(R) Xeon(R) Gold 6148 CPU", 6, 64, 64),
        ("sse2 avx avx2 fma avx512f", "GenuineIntel", "Intel(R) Xeon(R) Silver 4214", 6, 32, 32),
        (
            "sse2 avx avx2 fma avx512f amx_tile amx_bf16 avx512_bf16 avx512_fp16",
            "GenuineIntel",
            "Intel(R) Xeon(R) Platinum 8480+",
            6,
            64,
            1024,
        ),  # fmt: skip
        ("sse2 avx avx2 fma", "AuthenticAMD", "AMD EPYC 7601 32-Core Processor", 23, 16, 16),
        ("sse2 avx", "GenuineIntel", "Intel(R) Xeon(R) CPU E5-2670 0", 6, 16, 16),
        ("sse2", "", "", None, 8, 8),
        ("fp asimd asimdhp", "0x41", "Neoverse-N1", None, 16, 16),
        ("fp asimd sve sve2", "0x41", "Neoverse-V2", None, 32, 32),
    ],
)
def test_flops_per_cycle_from_flags(flags, vendor, model, family, fp32, bf16):
    got = _fpc(flags, vendor, model, family)
    assert (got["fp32"], got["fp64"], got["bf16"]) == (fp32, fp32 // 2, bf16)


def test_fp16_and_override(monkeypatch):
    assert _fpc("sse2 avx avx2 fma avx512f avx512_fp16", "GenuineIntel", "Xeon")["fp16"] == 128
    assert _fpc("sse2 avx avx2 fma")["fp16"] == 32  # converted to fp32: fp32 rate
    monkeypatch.setenv("HPCLAB_FLOPS_PER_CYCLE", "48")
    assert _fpc("sse2")["fp32"] == 48 and _fpc("sse2")["fp64"] == 24


# --- GPUs -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "spec", "key", "value"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM", "bf16", 989.4),
        ("NVIDIA H100 80GB HBM3", "H100 SXM", "fp64_tensor", 67.0),
        ("NVIDIA H100 PCIe", "H100 PCIe", "fp32", 51.0),
        ("NVIDIA H200", "H200 SXM", "mem_bw_gbps", 4800.0),
        ("NVIDIA H200", "H200 SXM", "tf32", 494.7),
        ("NVIDIA GH200 480GB", "GH200 (H100 SXM compute)", "fp32", 67.0),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB", "mem_bw_gbps", 2039.0),
        ("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB", "tf32", 156.0),
        ("NVIDIA A100-PCIE-40GB", "A100 PCIe 40GB", "fp64_tensor", 19.5),
        ("NVIDIA A100 80GB PCIe", "A100 PCIe 80GB", "bf16", 312.0),
        ("Tesla V100-SXM2-16GB", "V100 SXM2", "fp16", 125.0),
        ("Tesla V100-SXM2-32GB", "V100 SXM2", "mem_bw_gbps", 900.0),
        ("Tesla P100-PCIE-16GB", "P100 PCIe 16GB", "fp32", 9.3),
        ("Tesla P100-SXM2-16GB", "P100 SXM2", "fp16", 21.2),
        ("Tesla K40m", "K40", "fp64", 1.43),
        ("Tesla T4", "T4", "fp32", 8.1),
        ("NVIDIA L40S", "L40S", "fp32", 91.6),
        ("NVIDIA A40", "A40", "fp32", 37.4),
    ],
)
def test_gpu_table_matches_torch_names(name, spec, key, value):
    peak = gpu_peak_tflops(name)
    assert peak is not None and peak["spec"] == spec and peak[key] == value
    assert "datasheet" in peak["source"]


def test_unknown_gpu_is_none():
    assert gpu_peak_tflops("Some Future GPU") is None and gpu_peak_tflops(None) is None
    assert gpu_peak_tflops("NVIDIA A400") is None  # not an A40


def test_gpus_from_nvidia_smi_respect_cuda_visible_devices(tmp_path, monkeypatch):
    smi = tmp_path / "nvidia-smi"
    rows = [f"NVIDIA H100 80GB HBM3, 81559, 550.54.15, GPU-{c}, 9.0" for c in "ab"]
    smi.write_text("#!/bin/sh\n" + "".join(f"echo '{r}'\n" for r in rows))
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setitem(sys.modules, "pynvml", None)  # force the nvidia-smi path
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpus = sysinfo.gpu_inventory()
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[0]["memory_gb"] == pytest.approx(79.65, abs=0.01)
    assert gpus[0]["peak_tflops"]["spec"] == "H100 SXM" and gpus[0]["driver"] == "550.54.15"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert len(sysinfo.gpu_inventory()) == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert sysinfo.gpu_inventory() == []


# --- the whole record -------------------------------------------------------------------------
def test_system_info_is_json_and_does_not_initialise_cuda():
    import torch

    info = sysinfo.system_info(refresh=True)
    assert json.loads(json.dumps(info)) == info
    assert not torch.cuda.is_initialized()
    for key in ("host", "cpu_model", "cores_node", "cores_usable", "simd", "clock_ghz",
                "peak_gflops", "shm_gb", "scratch", "gpus", "torch", "slurm", "time"):  # fmt: skip
        assert key in info, key
    assert info["cores_usable"] <= info["cores_node"]
    assert set(info["simd"]) <= sysinfo.SIMD_FLAGS
    info["host"] = "changed"
    assert sysinfo.system_info()["host"] != "changed"  # callers get a copy


def test_fingerprint_and_scratch(tmp_path, monkeypatch):
    fp = sysinfo.fingerprint()
    assert set(fp) >= {"host", "cpu_model", "cores_usable", "clock_ghz", "gpus", "torch", "time"}
    json.dumps(fp)
    assert sysinfo._scratch_entry(str(tmp_path))["writable"] is True
    assert sysinfo._scratch_entry(str(tmp_path / "missing"))["writable"] is False


def test_gpu_facts_come_from_nvidia_smi_and_cuda_is_never_initialised(tmp_path, monkeypatch):
    """A GPU node without a GPU: a fake nvidia-smi and a torch that says it was built for CUDA.
    system_info, the peak lookups, the sentence of chapter 01, the inventory of chapter 03 and
    the doctor must answer from nvidia-smi; any call that would initialise CUDA fails the test."""
    import torch

    from hpclab import doctor
    from hpclab.compute import device as dev
    from hpclab.profiling import hardware

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA H200, 143771, 580.95.05, GPU-a, 9.0'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # NVML's count: no init
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    initialised = []

    def init(*a, **kw):
        initialised.append(1)
        raise AssertionError("CUDA initialised")

    for name in ("_lazy_init", "init", "get_device_name", "get_device_properties",
                 "get_device_capability", "mem_get_info", "is_bf16_supported"):  # fmt: skip
        monkeypatch.setattr(torch.cuda, name, init)
    monkeypatch.setattr(torch.backends.cudnn, "version", init)
    info = sysinfo.system_info(refresh=True)
    try:
        assert [(g["name"], g["capability"]) for g in info["gpus"]] == [("NVIDIA H200", "9.0")]
        assert info["gpus"][0]["peak_tflops"]["bf16"] == 989.4
        assert dev.device_name("cuda:0") == "NVIDIA H200"
        assert dev.peak_gflops("cuda:0", "bf16")[0] == pytest.approx(989.4e3)
        assert dev.unsupported("cuda:0", "tf32") is None
        assert "cuda:0 NVIDIA H200" in dev.gpu_sentence()
        assert [r["name"] for r in hardware.inventory()][1:] == ["NVIDIA H200"]
        checks = {c.name: c for c in doctor.run_checks()}
        assert "crashed" not in " ".join(c.message for c in checks.values())
        assert initialised == []
    finally:
        sysinfo._cached.cache_clear()  # later tests read the real facts again
