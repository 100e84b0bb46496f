"""Chapter 00: the doctor warns about what will really go wrong, and passes what works."""

from __future__ import annotations

import dataclasses

import pytest

from hpclab import doctor
from hpclab.doctor import Check, format_report, run_checks


@pytest.fixture
def info() -> dict:
    """A healthy 4-core allocation with one GPU, independent of this machine."""
    return {
        "host": "node1",
        "cpu_model": "Test CPU",
        "cores_node": 4,
        "cores_usable": 4,
        "torch_threads": 4,
        "clock_ghz": 3.0,
        "clock_method": "measured: test",
        "clock_ghz_nominal": 2.5,
        "peak_gflops": {"fp32": 384.0},
        "peak_derivation": {"fp32": "4 cores x 3.00 GHz (measured) x 32 FLOP/cycle = 384.0"},
        "shm_gb": 16.0,
        "mem_total_gb": 64.0,
        "scratch": {"/tmp": {"path": "/tmp", "writable": True, "free_gb": 100.0}},
        "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "memory_gb": 85.5}],
        "cuda": "12.8",
        "user_is_root": False,
    }


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def test_healthy_machine_is_all_ok(info, monkeypatch, tmp_path):
    monkeypatch.setenv("HPCLAB_RESULTS", str(tmp_path / "results"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    checks = by_name(run_checks(info))
    for name in ("gpu", "cuda_visible_devices", "shm", "threads", "scratch", "root", "port"):
        assert checks[name].level == "ok", checks[name]
    assert checks["results_dir"].level == "ok" and (tmp_path / "results").is_dir()
    assert "3.00 GHz measured" in checks["clock"].message and "2.50" in checks["clock"].message


def test_small_shm_warns(info):
    info["shm_gb"] = 0.0625  # Docker's default 64 MB
    c = by_name(run_checks(info))["shm"]
    assert c.level == "warn" and "64 MB" in c.message and "/dev/shm" in c.message
    assert "num_workers=0" in c.fix


def test_oversubscribed_threads_warn(info, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    info.update(cores_usable=1, torch_threads=4)
    c = by_name(run_checks(info))["threads"]
    assert c.level == "warn" and "OMP_NUM_THREADS=1" in c.fix
    # threads already fit, but OMP_NUM_THREADS unset while the node is larger than the share
    info.update(torch_threads=1)
    assert by_name(run_checks(info))["threads"].level == "warn"
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert by_name(run_checks(info))["threads"].level == "ok"


def test_no_gpu_and_cpu_build_and_empty_visible_devices(info, monkeypatch):
    gpus = info.pop("gpus")
    c = by_name(run_checks(info))["gpu"]
    assert c.level == "warn" and "reference results" in c.message
    info.update(gpus=gpus, cuda=None)
    assert "CPU build" in by_name(run_checks(info))["gpu"].message
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert by_name(run_checks(info))["cuda_visible_devices"].level == "warn"


def test_port_check_passes_here():
    c = doctor._port({})
    assert c.level == "ok" and "127.0.0.1" in c.message


def test_slow_reverse_dns_warns_within_its_budget():
    import threading

    release = threading.Event()

    def stuck(*_):
        release.wait(60)  # a lookup that never answers while the check runs

    try:
        c = doctor._reverse_dns({}, lookup=stuck, budget_s=0.2)  # returns: it did not wait
    finally:
        release.set()
    assert c.level == "warn" and "torchrun" in c.message and "0.2 s" in c.message
    assert doctor._reverse_dns({}, lookup=lambda *_: ("localhost", "0")).level == "ok"

    def refused(*_):
        raise OSError("no name")

    assert doctor._reverse_dns({}, lookup=refused).level == "ok"  # a fast "no" is fine


def test_nominal_clock_warns(info):
    info.update(clock_method="/proc/cpuinfo 'cpu MHz' (nominal, may be the base clock)")
    c = by_name(run_checks(info))["clock"]
    assert c.level == "warn" and "exceed 100" in c.message


def test_results_dir_unwritable_fails(monkeypatch):
    monkeypatch.setenv("HPCLAB_RESULTS", "/proc/hpclab-cannot-exist")
    assert doctor._results({}).level == "fail"


def test_root_scratch_and_packages(info, monkeypatch):
    info["user_is_root"] = True
    info["scratch"]["TMPDIR"] = {"path": "/ro", "writable": False, "free_gb": None}
    monkeypatch.setattr(doctor, "OPTIONAL_PACKAGES", ("json", "no_such_package_xyz"))
    checks = by_name(run_checks(info))
    assert checks["root"].level == "warn" and "--allow-root" in checks["root"].fix
    assert checks["scratch"].level == "warn" and "TMPDIR" in checks["scratch"].message
    assert checks["packages"].level == "warn"
    assert "no_such_package_xyz" in checks["packages"].message
    assert "json" not in checks["packages"].message.split(": ", 1)[1]


def test_empty_info_never_crashes_and_report_reads(info):
    checks = run_checks({})
    assert len(checks) == len(doctor.CHECKS)
    assert all(c.level in ("ok", "warn", "fail") for c in checks)
    assert all("\n" not in c.message and "\n" not in c.fix for c in checks)
    format_report(checks, {})
    info["shm_gb"] = 0.0625
    text = format_report(run_checks(info), info)
    assert "node1" in text and "[warn] shm" in text and "fix: " in text and "384.0" in text
    with pytest.raises(dataclasses.FrozenInstanceError):
        checks[0].level = "ok"  # type: ignore[misc]
