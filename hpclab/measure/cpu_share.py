"""How much of the allocation's CPU a run really got (chapter 00; shown beside every live result).

On a shared node other processes take cores while we measure: two threads come out slower than
one, a GEMM reaches a third of its peak, and nothing in the number says why. Around a run we read

- this process's CPU seconds (``getrusage``: its threads, and rank processes it has reaped), and
- the busy seconds of the cores we may use (``psutil.cpu_times(percpu=True)`` on the affinity set),

so ``others = busy - ours`` is what other processes took from our cores meanwhile. OpenMP threads
spin while they wait, so ``ours`` is an upper bound on useful work; ``others`` is the signal.

Others being busy is not yet others being *in our way*: a one-thread run on two cores leaves a
core free for them. Where the work runs in this process, the kernel also says how long our
threads sat runnable but waiting for a core (``/proc/self/task/*/schedstat``, the run-queue
delay): a run is disturbed only when others were busy *and* we waited. Where the work ran in
child processes (ranks), their run-queue delay is gone when they are reaped, and others being
busy is the signal alone.
"""

from __future__ import annotations

import contextlib
import os
import resource
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from hpclab.measure.sysinfo import usable_cpu_ids

# Other processes using more than this many of our cores make a live number "disturbed"...
DISTURBED_CORES = 0.3
# ... when our threads also waited for a core this much of the time (where that is known).
WAITED_CORES = 0.1
# CPU times advance in scheduler ticks (4-10 ms): over a shorter run the ratios are mostly
# rounding ("3.8 of 2 cores" over 5 ms), so such a run is never judged.
MIN_WALL_S = 0.25


@dataclass(frozen=True)
class CpuShare:
    cores: int  # cores this process may use
    wall_s: float
    own_cores: float  # CPU seconds of this process (and reaped children) / wall seconds
    others_cores: float  # busy seconds of our cores taken by other processes / wall seconds
    # Seconds our threads were runnable but waiting for a core / wall seconds; None when not known
    # (no schedstat, or the work ran in child processes).
    waited_cores: float | None = None

    @property
    def disturbed(self) -> bool:
        if self.wall_s < MIN_WALL_S or self.others_cores < DISTURBED_CORES:
            return False
        return self.waited_cores is None or self.waited_cores >= WAITED_CORES

    def sentence(self) -> str:
        """One line for a plot or a status ("" when the run had the cores to itself)."""
        if not self.disturbed:
            return ""
        return (
            f"you got {min(self.own_cores, self.cores):.1f} of {self.cores} cores; other processes "
            f"used {min(self.others_cores, self.cores):.1f} meanwhile: these numbers are low (run again when it is quiet)"
        )

    def to_dict(self) -> dict[str, float]:
        return {**asdict(self), "disturbed": self.disturbed}


def _own_seconds(descendants: bool = False) -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    if descendants:
        # Live children (e.g. DataLoader workers) are not in RUSAGE_CHILDREN until reaped; one
        # reaped in between moves from here into RUSAGE_CHILDREN, so the difference stays right.
        try:
            import psutil

            for child in psutil.Process().children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    t = child.cpu_times()
                    total += t.user + t.system
        except ImportError:
            pass
    return total


def _self_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _waiting_seconds() -> dict[int, float] | None:
    """Run-queue delay of each thread of this process (seconds), or None without schedstat."""
    out: dict[int, float] = {}
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return out or None


def _busy_seconds(cpus: list[int]) -> float | None:
    try:
        import psutil

        per = psutil.cpu_times(percpu=True)
    except (ImportError, OSError):
        return None
    busy = 0.0
    for i in cpus:
        if i < len(per):
            t = per[i]
            busy += sum(t) - t.idle - getattr(t, "iowait", 0.0)
    return busy


class _Holder:
    value: CpuShare | None = None


@contextlib.contextmanager
def measure_cpu_share(descendants: bool = False) -> Iterator[_Holder]:
    """``with measure_cpu_share() as got: ...``; afterwards ``got.value`` is a :class:`CpuShare`.

    ``descendants=True`` counts this process's live children as ours too (a training rank's
    DataLoader workers); by default a child still running is one of the "other processes".
    """
    cpus = usable_cpu_ids()
    holder = _Holder()
    wait0, self0 = _waiting_seconds(), _self_seconds()
    own0, busy0 = _own_seconds(descendants), _busy_seconds(cpus)
    t0 = time.perf_counter()
    try:
        yield holder
    finally:
        wall = max(time.perf_counter() - t0, 1e-9)
        own_s = _own_seconds(descendants) - own0
        own = own_s / wall
        busy1 = _busy_seconds(cpus)
        wait1 = _waiting_seconds()
        others = 0.0
        if busy0 is not None and busy1 is not None:
            others = max(0.0, (busy1 - busy0) / wall - own)
        waited = None
        # Known only when the work ran here: children's delay left with them.
        in_children = own_s - (_self_seconds() - self0)
        if wait0 is not None and wait1 is not None and in_children <= 0.2 * own_s:
            waited = sum(w - wait0.get(tid, 0.0) for tid, w in wait1.items()) / wall
        # No share exceeds the cores we may use (children inherit our affinity): more is tick
        # rounding over a short run.
        cores = len(cpus)
        holder.value = CpuShare(
            cores,
            wall,
            min(own, cores),
            min(others, cores),
            None if waited is None else min(waited, cores),
        )


def cpu_share(fn, cores: int | None = None) -> float:
    """Run ``fn()``; return this process's CPU seconds / (wall seconds x cores)."""
    with measure_cpu_share() as got:
        fn()
    share = got.value
    return share.own_cores / (cores or share.cores)
