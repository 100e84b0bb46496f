"""Watching the hardware: a sampler during a run, a burn-in check, an inventory (chapter 03).

Nakayama 2017 checks a GPU box with ``nvidia-smi`` (utilisation, memory, power, clocks),
gpu-burn (a long matmul loop whose results are verified: a faulty card shows errors or throttles)
and the CUDA samples' ``deviceQuery``. Here: :class:`Sampler` records CPU % per core and the
process tree's RSS (and, with a GPU and ``nvidia-smi``, utilisation, memory, power and SM clock)
in a background thread while a run goes on; :func:`burn` is a short verified matmul loop on each
device; :func:`inventory` lists what this allocation has.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from typing import Any

import psutil
import torch

SMI_FIELDS = ("utilization.gpu", "memory.used", "power.draw", "clocks.sm")
NO_GPU = "no NVIDIA GPU here (nvidia-smi not found or no device): showing CPU data only."


def gpu_samples() -> list[dict[str, Any]] | None:
    """One ``nvidia-smi`` reading per GPU, or None without a GPU and driver."""
    if shutil.which("nvidia-smi") is None:
        return None
    cmd = [
        "nvidia-smi",
        f"--query-gpu=index,{','.join(SMI_FIELDS)}",
        "--format=csv,noheader,nounits",
    ]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=5, check=True).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    rows = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 1 + len(SMI_FIELDS):
            continue

        def num(s: str) -> float | None:
            try:
                return float(s)
            except ValueError:
                return None  # "[N/A]" on some boards

        idx, util, mem, power, clock = parts
        rows.append(
            {
                "gpu": int(idx),
                "gpu_util_pct": num(util),
                "gpu_mem_mib": num(mem),
                "power_w": num(power),
                "sm_clock_mhz": num(clock),
            }
        )
    return rows or None


class Sampler:
    """Samples CPU % per core, RSS of this process and its children, and GPUs (if any) every
    ``interval_s`` in a thread; use as a context manager. ``records`` is a list of flat dicts
    (``seconds``, ``core``, ``cpu_pct``), (``seconds``, ``rss_mib``), (``seconds``, ``gpu``...).
    """

    def __init__(self, interval_s: float = 0.2, gpu: bool = True) -> None:
        self.interval_s = interval_s
        self.records: list[dict[str, Any]] = []
        self.note = ""
        self._gpu = gpu
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self, t0: float, proc: psutil.Process) -> None:
        now = time.perf_counter() - t0
        for core, pct in enumerate(psutil.cpu_percent(percpu=True)):
            self.records.append({"seconds": now, "kind": "cpu", "core": core, "cpu_pct": pct})
        rss = proc.memory_info().rss
        for child in proc.children(recursive=True):
            try:
                rss += child.memory_info().rss
            except psutil.Error:
                pass
        self.records.append({"seconds": now, "kind": "rss", "rss_mib": rss / 2**20})
        if self._gpu:
            for g in gpu_samples() or ():
                self.records.append({"seconds": now, "kind": "gpu", **g})

    def _loop(self) -> None:
        proc, t0 = psutil.Process(), time.perf_counter()
        psutil.cpu_percent(percpu=True)  # the first call only sets the reference point
        while not self._stop.wait(self.interval_s):
            self._sample(t0, proc)

    def __enter__(self) -> Sampler:
        if self._gpu and gpu_samples() is None:
            self._gpu, self.note = False, NO_GPU
        self._thread = threading.Thread(target=self._loop, daemon=True, name="hpclab-sampler")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)


def burn(device: str = "cpu", seconds: float = 3.0, n: int = 1024) -> dict[str, Any]:
    """A gpu-burn-style check: ``C = A @ B`` repeated for ``seconds``, each result compared with
    the first one (same inputs, so any difference is an error). Returns GFLOP/s and errors."""
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(n, n, generator=gen).to(device)
    b = torch.rand(n, n, generator=gen).to(device)
    ref = a @ b
    # The same kernel on the same inputs should give the same bits; allow the last-bit wobble
    # of a different blocking (another thread count) and nothing more.
    tol = 1e-4 * float(ref.abs().max())
    iters = errors = 0
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    sync()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        c = a @ b
        if float((c - ref).abs().max()) > tol:
            errors += 1
        iters += 1
    sync()
    dt = time.perf_counter() - t0
    return {
        "device": device,
        "n": n,
        "iterations": iters,
        "errors": errors,
        "gflops": 2 * n**3 * iters / dt / 1e9,
        "seconds": dt,
    }


def inventory() -> list[dict[str, Any]]:
    """``deviceQuery``-style facts: the CPU of this allocation and each visible GPU."""
    from hpclab.measure.sysinfo import system_info

    info = system_info()
    rows = [
        {
            "device": "cpu",
            "name": info.get("cpu_model"),
            "cores_usable": info.get("cores_usable"),
            "clock_ghz": info.get("clock_ghz"),
            "memory_gb": info.get("mem_total_gb"),
        }
    ]
    # From NVML/nvidia-smi: asking torch for device properties would initialise CUDA, and
    # ranks could no longer be forked in this kernel. SM counts only once CUDA is up anyway.
    cuda_up = torch.cuda.is_initialized()
    for g in info.get("gpus") or []:
        i = g["index"]
        sms = torch.cuda.get_device_properties(i).multi_processor_count if cuda_up else None
        rows.append(
            {
                "device": f"cuda:{i}",
                "name": g.get("name"),
                "capability": g.get("capability"),
                "multiprocessors": sms,
                "memory_gb": g.get("memory_gb"),
            }
        )
    return rows
