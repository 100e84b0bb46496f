"""Memory before it bites and after it bit: the pre-flight estimate, and naming the OOM killer.

On a cluster node a run that asks for more memory than its job has is not refused by anyone: the
machine swaps or thrashes, then the kernel's out-of-memory killer sends SIGKILL to the largest
process, and all the user sees is "killed by SIGKILL (signal 9)". Two things help:

- **Before**: :func:`preflight` compares a run's estimate (tensors from the chapter's memory
  model, plus one Python + PyTorch runtime per process) with what is left to this process (the
  tighter of the cgroup's limit minus its usage and the kernel's ``MemAvailable``). It refuses
  with both numbers when the estimate does not fit, and warns when it comes close.
- **After**: an :class:`OomWatch` made before the run reads the kernel's OOM-kill counters again
  when a process died by SIGKILL: the counter of this process's memory cgroup and its ancestors
  (cgroup v2 ``memory.events``, v1 ``memory.oom_control``; Slurm puts a job in one) and the
  machine's (``oom_kill`` in ``/proc/vmstat``). A counter that grew names the killer. The kernel
  log would say which process it chose, but reading it needs privileges.
"""

from __future__ import annotations

import functools
import subprocess
import sys

from hpclab.measure.clock import read_text
from hpclab.measure.sysinfo import GIB, cgroup_files, cgroup_mem_gb

WARN_FRACTION = 0.8  # an estimate above this share of what is left gets a warning
# A generous bound on one process's Python + PyTorch runtime: when even this fits, nothing is
# measured. Otherwise the runtime is measured once (a fresh interpreter importing torch).
GENEROUS_RUNTIME_BYTES = 1 * GIB


def oom_kill_counts(pid: int | str = "self") -> dict[str, int]:
    """The kernel's OOM-kill counters that a kill of ``pid`` (or of its children) would raise:
    ``{"machine": n, "<cgroup file>": n, ...}``; only those that can be read."""
    counts: dict[str, int] = {}
    for line in (read_text("/proc/vmstat") or "").splitlines():
        if line.startswith("oom_kill "):
            counts["machine"] = int(line.split()[1])
    files = cgroup_files("", "memory.events", pid) + cgroup_files(
        "memory", "memory.oom_control", pid
    )
    for path, text in files:
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                counts[path] = int(value)
    return counts


class OomWatch:
    """Made before a run; :meth:`verdict` after a process died by SIGKILL says whether the
    out-of-memory killer did it ("" when no counter moved)."""

    def __init__(self, pid: int | str = "self"):
        self.pid = pid
        self.before = oom_kill_counts(pid)

    def verdict(self) -> str:
        after = oom_kill_counts(self.pid)
        grew = {k for k, v in after.items() if v > self.before.get(k, v)}
        if grew - {"machine"}:
            limit = cgroup_mem_gb()
            where = f"its job's memory limit of {limit:.1f} GiB" if limit else "its cgroup's limit"
            return f"the out-of-memory killer (the run went over {where})"
        if "machine" in grew:
            return "the out-of-memory killer (this machine ran out of memory)"
        return ""


def available_bytes() -> tuple[float | None, str]:
    """What memory is left to this process and where the figure comes from: the tighter of the
    cgroup's limit minus its usage and the kernel's ``MemAvailable``; (None, "") if unknown."""
    options: list[tuple[float, str]] = []
    for line in (read_text("/proc/meminfo") or "").splitlines():
        if line.startswith("MemAvailable:"):
            options.append((int(line.split()[1]) * 1024, "available on this machine"))
    limit = cgroup_mem_gb()
    if limit:
        usage = [t for _, t in cgroup_files("", "memory.current")]
        usage += [t for _, t in cgroup_files("memory", "memory.usage_in_bytes")]
        used = int(usage[0]) if usage and usage[0].isdigit() else 0
        options.append((limit * GIB - used, f"left under this job's limit of {limit:.1f} GiB"))
    return min(options) if options else (None, "")


@functools.lru_cache(maxsize=1)
def runtime_bytes() -> float:
    """Private memory (USS) of a fresh interpreter that imported torch and ran one matmul: what
    every extra rank or worker costs before its own tensors. Measured once per process."""
    code = (
        "import psutil, torch\n"
        "x = torch.ones(64, 64); (x @ x).sum().item()\n"
        "print(psutil.Process().memory_full_info().uss)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    try:
        return float(out.stdout.split()[-1])
    except (IndexError, ValueError):
        return float(GENEROUS_RUNTIME_BYTES)


def preflight(what: str, tensor_bytes: float, processes: int, advice: str, progress=None) -> str:
    """Refuse a run whose estimate does not fit (``ConfigError``: both numbers and ``advice``);
    return a warning line when it comes within :data:`WARN_FRACTION` of it (shown as the
    ``progress`` note too, when given), else ""."""
    from hpclab.config import ConfigError

    avail, source = available_bytes()
    if avail is None or tensor_bytes + processes * GENEROUS_RUNTIME_BYTES < WARN_FRACTION * avail:
        return ""
    per = runtime_bytes()
    need = tensor_bytes + processes * per
    words = (
        f"{what} would need about {need / GIB:.1f} GiB ({processes} processes x {per / GIB:.2f} GiB of "
        f"Python and PyTorch + {tensor_bytes / GIB:.1f} GiB of tensors), and {avail / GIB:.1f} GiB "
        f"is {source}"
    )
    if need > avail:
        raise ConfigError(f"{words}: {advice}")
    if need > WARN_FRACTION * avail:
        warning = f"{words}: close to the limit; the machine may swap or kill a process"
        if progress is not None:
            progress.update(0, 1, warning)
        return warning
    return ""
