"""What this allocation is: cores you may use, the real clock, peaks, memory, GPUs (chapter 00).

Two rules run through this module:

- *The allocation, not the node.* ``os.cpu_count()`` counts the node's cores; a Slurm job or a
  container may use far fewer. Usable cores are the minimum of the CPU affinity mask, the cgroup
  CPU quota and ``SLURM_CPUS_PER_TASK``, and every source is reported beside the result.
- *Never initialise CUDA here.* Ranks are started with fork (~0.05 s, vs ~2 s for spawn), and
  forking after CUDA is initialised is broken (DESIGN.md, Known facts). GPU names and memory come
  from NVML (pynvml) or ``nvidia-smi``; torch is asked only for the NVML-based device count, and
  for device properties only if CUDA was already initialised by someone else.

Every field fails soft to None; :func:`system_info` is JSON-serialisable and cached. Sizes
(``*_gb``) are GiB.
"""

from __future__ import annotations

import copy
import datetime as _dt
import functools
import math
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from typing import Any

from hpclab.measure.clock import measure_clock_ghz, nominal_clock_ghz, read_text
from hpclab.measure.peaks import cpu_peaks, gpu_peak_tflops

# Sizes ("*_gb" fields) are GiB, as `free -g`, `df -h` and nvidia-smi count them: an "80GB"
# H100 shows 79.6, Docker's default 64 MB /dev/shm shows 0.0625.
GIB = 2**30
# Flags that decide FLOP/cycle (x86 /proc/cpuinfo "flags", aarch64 "Features").
SIMD_FLAGS = frozenset(
    "sse2 avx avx2 fma avx512f avx512bw avx512vl avx512_vnni avx512_bf16 avx512_fp16 "
    "amx_tile amx_bf16 amx_int8 amx_fp16 asimd asimdhp sve sve2".split()
)
CPU_SYSFS = "/sys/devices/system/cpu"
SLURM_VARS = tuple(
    "SLURM_JOB_ID SLURM_JOB_NODELIST SLURM_CPUS_PER_TASK SLURM_GPUS_ON_NODE SLURM_NTASKS "
    "SLURM_JOB_PARTITION SLURM_PROCID".split()
)


def _soft(fn, *args, default=None):  # noqa: ANN001, ANN202 - tiny internal helper
    """Call ``fn``; any exception becomes ``default`` (one bad probe must not sink the report)."""
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001
        return default


def cpuinfo() -> dict[str, Any]:
    """Model, vendor, family and flags of the first CPU in /proc/cpuinfo (lscpu as fallback)."""
    text = read_text("/proc/cpuinfo") or ""
    first = text.split("\n\n", 1)[0]
    fields = dict(re.findall(r"^([^\t:\n]+?)\s*:\s*(.*)$", first, re.MULTILINE))
    flags = (fields.get("flags") or fields.get("Features") or "").split()
    model = fields.get("model name") or fields.get("Model name")
    vendor = fields.get("vendor_id") or fields.get("CPU implementer")
    if not model and shutil.which("lscpu"):
        out = _soft(lambda: subprocess.run(["lscpu"], capture_output=True, text=True, timeout=5))
        m = re.search(r"^Model name:\s*(.+)$", out.stdout if out else "", re.MULTILINE)
        model = m.group(1).strip() if m else None
    family = fields.get("cpu family")
    return {
        "model": model or platform.processor() or None,
        "vendor": vendor,
        "family": int(family) if family and family.isdigit() else None,
        "flags": flags,
    }


def cgroup_files(controller: str, name: str, pid: int | str = "self") -> list[tuple[str, str]]:
    """File ``name`` of process ``pid``'s cgroup and all its ancestors, innermost first, as
    (path, text) for each one that can be read.

    ``controller=""`` reads cgroup v2 (line ``0::/path``); otherwise the v1 hierarchy holding
    that controller (line ``4:memory:/slurm/uid_1/job_2``), mounted at /sys/fs/cgroup/<ctrls>.
    """
    for line in (read_text(f"/proc/{pid}/cgroup") or "").splitlines():
        _, ctrls, rel = (line.split(":", 2) + ["", ""])[:3]
        if ctrls == controller or (controller and controller in ctrls.split(",")):
            mount = "/sys/fs/cgroup" + (f"/{ctrls}" if ctrls else "")
            parts = [p for p in rel.strip().split("/") if p]
            paths = ["/".join([mount, *parts[:d], name]) for d in range(len(parts), -1, -1)]
            return [(path, text.strip()) for path in paths if (text := read_text(path))]
    return []


def _cgroup(controller: str, name: str) -> list[str]:
    return [text for _, text in cgroup_files(controller, name)]


def _cgroup_cpus() -> int | None:
    """CPU quota of this process's cgroup, in whole cores (floor, at least 1), or None."""
    # v2 cpu.max: "max 100000" or "200000 100000"; a parent's limit binds too: take the tightest.
    pairs = [t.partition(" ")[::2] for t in _cgroup("", "cpu.max")]
    v1 = _cgroup("cpu", "cpu.cfs_quota_us"), _cgroup("cpu", "cpu.cfs_period_us")
    pairs += zip(*v1, strict=False)
    limits = [int(q) / int(p) for q, p in pairs if q.isdigit() and p.isdigit() and int(q) > 0]
    # floor, like Go's automaxprocs: threads beyond the quota only get throttled.
    return max(1, math.floor(min(limits))) if limits else None


def cgroup_mem_gb() -> float | None:
    """Memory limit of this cgroup (Slurm --mem, docker --memory) in GiB, or None."""
    texts = _cgroup("", "memory.max") + _cgroup("memory", "memory.limit_in_bytes")
    limits = [int(t) for t in texts if t.isdigit() and int(t) < 2**60]  # v1: ~2**63 = no limit
    return min(limits) / GIB if limits else None


def core_limits() -> dict[str, int | None]:
    """Each limit on the cores this process may use: node, affinity, cgroup quota, Slurm."""
    return {
        "node": os.cpu_count(),
        "affinity": _soft(lambda: len(usable_cpu_ids())),
        "cgroup": _soft(_cgroup_cpus),
        "slurm_cpus_per_task": _soft(lambda: int(os.environ["SLURM_CPUS_PER_TASK"])),
    }


def usable_cpu_ids() -> list[int]:
    """The logical CPUs this process may run on (its affinity set; every CPU where the system
    has no affinity): the one place core ids are read. :func:`usable_cores` counts the usable
    ones, which a cgroup quota or Slurm can make fewer than this set."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def usable_cores() -> int:
    """Cores this process may use: the tightest of :func:`core_limits` (the one helper)."""
    known = [v for v in core_limits().values() if isinstance(v, int) and v > 0]
    return min(known) if known else 1


def physical_cores(cpus: Iterable[int] | None = None, sysfs: str | None = None) -> int | None:
    """Physical cores among the logical CPUs ``cpus`` (default: this process's affinity set).

    With SMT (hyper-threading) two logical CPUs are one core sharing its FMA pipes, so a peak
    counts cores, not logical CPUs: distinct (``physical_package_id``, ``core_id``) pairs of
    sysfs's topology. None where sysfs has no topology (then the logical count stands in).
    """
    cpus = usable_cpu_ids() if cpus is None else cpus
    sysfs = sysfs or CPU_SYSFS
    cores = set()
    for cpu in cpus:
        ids = [
            read_text(f"{sysfs}/cpu{cpu}/topology/{f}") for f in ("physical_package_id", "core_id")
        ]
        if None in ids:
            return None
        cores.add(tuple(t.strip() for t in ids))
    return len(cores) or None


def usable_physical_cores() -> int:
    """Physical cores of the allocation: those within the affinity set, at most the usable
    logical count (a cgroup quota or Slurm can allow fewer threads than the set has cores)."""
    usable = usable_cores()
    phys = _soft(physical_cores)
    return min(phys, usable) if phys else usable


def _scratch_entry(path: str | None) -> dict[str, Any]:
    entry: dict[str, Any] = {"path": path, "writable": False, "free_gb": None}
    if not path or not os.path.isdir(path):
        return entry
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".hpclab-probe-"):
            entry["writable"] = True
    except OSError:
        pass
    st = _soft(os.statvfs, path)
    entry["free_gb"] = st.f_bavail * st.f_frsize / GIB if st else None
    return entry


def _mib_to_gb(mib: str) -> float:
    return float(mib) / 1024


def _smi_gpus() -> list[dict[str, Any]]:
    """GPUs as NVML sees them (pynvml, else nvidia-smi), without touching CUDA."""
    try:
        import pynvml

        def text(x: str | bytes) -> str:  # older pynvml returns bytes
            return x.decode() if isinstance(x, bytes) else x

        pynvml.nvmlInit()
        try:
            driver = text(pynvml.nvmlSystemGetDriverVersion())
            out = []
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                cc = _soft(pynvml.nvmlDeviceGetCudaComputeCapability, h)
                g = {
                    "name": text(pynvml.nvmlDeviceGetName(h)),
                    "uuid": _soft(pynvml.nvmlDeviceGetUUID, h),
                }
                g["memory_gb"] = pynvml.nvmlDeviceGetMemoryInfo(h).total / GIB
                g["capability"] = "{}.{}".format(*cc) if cc else None
                out.append({**g, "driver": driver})
            return out
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no pynvml, or no driver: try nvidia-smi
        pass
    exe = shutil.which("nvidia-smi")
    for fields in ("name,memory.total,driver_version,uuid,compute_cap", "name,memory.total"):
        if exe is None:
            break
        cmd = [exe, f"--query-gpu={fields}", "--format=csv,noheader,nounits"]
        res = _soft(lambda c=cmd: subprocess.run(c, capture_output=True, text=True, timeout=5))
        if res is None or res.returncode != 0:
            continue  # old drivers do not know compute_cap: retry with fewer fields
        keys = ("name", "memory_gb", "driver", "uuid", "capability")
        rows = [map(str.strip, ln.split(",")) for ln in res.stdout.splitlines()]
        gpus = [dict(zip(keys, row, strict=False)) for row in rows]
        for g in gpus:  # nvidia-smi reports MiB
            g["memory_gb"] = _soft(_mib_to_gb, g.get("memory_gb"))
        return [g for g in gpus if g.get("name")]
    return []


def _visible(gpus: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Apply CUDA_VISIBLE_DEVICES (NVML lists every GPU of the node, CUDA only these)."""
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        return gpus
    picked = []
    for tok in (t.strip() for t in cvd.split(",") if t.strip()):
        if tok.isdigit() and int(tok) < len(gpus):
            picked.append(gpus[int(tok)])
        elif tok.startswith("MIG-"):
            return gpus  # a MIG slice: report its parent GPUs (approximate)
        elif tok.startswith("GPU-"):
            picked += [g for g in gpus if (g.get("uuid") or "").startswith(tok)]
        else:
            break  # CUDA stops at the first invalid entry
    return picked


def gpu_inventory() -> list[dict[str, Any]]:
    """Visible GPUs with name, memory, capability, driver and datasheet peaks; no CUDA init."""
    gpus = _visible(_smi_gpus())
    torch = sys.modules.get("torch")  # if torch is not imported, CUDA is not initialised
    if torch is not None and _soft(torch.cuda.is_initialized, default=False):
        # Someone already initialised CUDA: torch's own view is exact (and free now).
        driver = gpus[0]["driver"] if gpus else None
        props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
        gpus = [
            {"name": p.name, "memory_gb": p.total_memory / GIB, "driver": driver}
            | {"capability": f"{p.major}.{p.minor}"}
            for p in props
        ]
    out = []
    for i, g in enumerate(gpus):
        peak = gpu_peak_tflops(g.get("name"))
        facts = {k: g.get(k) for k in ("name", "memory_gb", "capability", "driver")}
        out.append(
            {"index": i, **facts, "peak_tflops": peak, "peak_source": peak and peak["source"]}
        )
    return out


def _torch_facts() -> dict[str, Any]:
    try:
        import torch
    except Exception:  # noqa: BLE001
        return {"torch": None, "cuda": None, "nccl": None, "cudnn": None, "torch_threads": None}
    nccl = cudnn = None
    if torch.version.cuda:
        # Versions torch was built with: constants, no library is loaded and no CUDA call made
        # (the runtime cuDNN version would load cuDNN; that waits until CUDA is up anyway).
        if _soft(torch.distributed.is_nccl_available, default=False):
            v = _soft(torch.cuda.nccl.version)
            nccl = ".".join(map(str, v)) if isinstance(v, tuple) else v
        built = _soft(lambda: torch._C._cudnn.getCompileVersion())
        cudnn = ".".join(map(str, built)) if isinstance(built, tuple) else None
        if _soft(torch.cuda.is_initialized, default=False):
            cudnn = _soft(torch.backends.cudnn.version) or cudnn
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "torch_cuda_devices": _soft(torch.cuda.device_count, default=0),  # NVML-based, no init
        "nccl": nccl,
        "cudnn": cudnn,
        "torch_threads": _soft(torch.get_num_threads),
    }


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("hpclab")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def clock_label(method: str) -> str:
    """Short label of how the clock was obtained, for peak derivations ("measured", ...)."""
    return "measured" if method.startswith("measured") else method.split(" [")[0]


def _collect() -> dict[str, Any]:
    return {
        "host": socket.gethostname(),
        "os": f"{platform.system()} {platform.release()}",
        "arch": platform.machine(),
        "python": platform.python_version(),
        **_cpu_facts(),
        **_memory_facts(),
        "gpus": _soft(gpu_inventory, default=[]),
        **_torch_facts(),
        "slurm": {k: os.environ[k] for k in SLURM_VARS if k in os.environ},
        "hpclab": _version(),
        "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "user_is_root": hasattr(os, "geteuid") and os.geteuid() == 0,
    }


def _cpu_facts() -> dict[str, Any]:
    """The CPU, the cores this process may use, its measured clock and its peaks."""
    cpu = _soft(cpuinfo, default={"model": None, "vendor": None, "family": None, "flags": []})
    physical = usable_physical_cores()
    ghz, method = measure_clock_ghz()
    nominal, _ = _soft(nominal_clock_ghz, default=(None, ""))
    peaks = _soft(
        lambda: cpu_peaks(
            physical,  # SMT siblings share a core's FMA pipes: the peak counts physical cores
            ghz,
            cpu["flags"],
            cpu["vendor"] or "",
            cpu["model"] or "",
            family=cpu["family"],
            clock_label=clock_label(method),
        ),
        default={},
    )
    return {
        "cpu_model": cpu["model"],
        "cpu_vendor": cpu["vendor"],
        "cpu_family": cpu["family"],
        "cores_node": os.cpu_count(),
        "cores_usable": usable_cores(),
        "cores_usable_sources": core_limits(),
        "cores_physical": physical,
        # which CPUs exactly (chapter 07's binding): two ranks on one list share those cores
        "cpus_allowed": _soft(lambda: sorted(os.sched_getaffinity(0)), default=[]),
        "simd": sorted(SIMD_FLAGS.intersection(cpu["flags"])),
        "clock_ghz": ghz,
        "clock_method": method,
        "clock_ghz_nominal": nominal,
        "flops_per_cycle": {k: v["flops_per_cycle"] for k, v in peaks.items()},
        "peak_gflops": {k: v["gflops"] for k, v in peaks.items()},
        "peak_derivation": {k: v["derivation"] for k, v in peaks.items()},
    }


def _memory_facts() -> dict[str, Any]:
    """Memory (the node's, and the allocation's limit), /dev/shm, and the scratch folders."""
    vm = _soft(lambda: __import__("psutil").virtual_memory())
    shm = _soft(os.statvfs, "/dev/shm")
    return {
        "mem_total_gb": vm.total / GIB if vm else None,
        "mem_available_gb": vm.available / GIB if vm else None,
        "mem_limit_gb": _soft(cgroup_mem_gb),  # the allocation's share; None = no limit
        "shm_gb": shm.f_blocks * shm.f_frsize / GIB if shm else None,
        "scratch": {
            key: _soft(_scratch_entry, path, default={"path": path, "writable": False})
            for key, path in (
                ("SLURM_TMPDIR", os.environ.get("SLURM_TMPDIR")),
                ("TMPDIR", os.environ.get("TMPDIR")),
                ("/tmp", "/tmp"),
            )
        },
    }


@functools.cache
def _cached() -> dict[str, Any]:
    return _collect()


def system_info(refresh: bool = False) -> dict[str, Any]:
    """Hardware and software facts of this allocation, JSON-serialisable (chapter 00).

    Cached per process; ``refresh=True`` reads everything again except the clock, which
    :func:`~hpclab.measure.clock.measure_clock_ghz` caches on its own. Returns a copy.
    """
    if refresh:
        _cached.cache_clear()
    return copy.deepcopy(_cached())


def fingerprint(info: dict[str, Any] | None = None) -> dict[str, Any]:
    """The facts that identify where a saved result was measured (chapter 00); time is now."""
    info = info if info is not None else system_info()
    return {
        "host": info.get("host"),
        "cpu_model": info.get("cpu_model"),
        "cores_usable": info.get("cores_usable"),
        "clock_ghz": info.get("clock_ghz"),
        "gpus": [g.get("name") for g in info.get("gpus") or []],
        "torch": info.get("torch"),
        "cuda": info.get("cuda"),
        "slurm_job_id": (info.get("slurm") or {}).get("SLURM_JOB_ID"),
        "hpclab": info.get("hpclab"),
        "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
