"""memory_profiler and tracemalloc -> memory over time, per line, per allocation site
(chapter 03).

The tools measure different things, and the same run gives different numbers in each:

- ``memory_profiler.memory_usage`` samples the process's **resident set size** (RSS: every page
  the process touches, Python objects, torch tensors, libraries, allocator slack) from a second
  process at a fixed interval. A leak shows as a ramp.
- ``memory_profiler.LineProfiler`` reads RSS at each line of a function (in a ``.py`` file; the
  ``%mprun`` magic cannot profile a function typed in a cell), so a line's *increment* is what RSS
  grew by while it ran.
- ``tracemalloc`` (standard library) records **Python's allocator** only, with the line that
  allocated each block: exact sites for Python objects, but blind to torch tensors, which torch
  allocates in C++ (a tensor leak is invisible to it).

RSS counts pages, not objects. What a program frees, glibc's ``malloc`` mostly keeps, resident,
for the next allocation: after the patient builds its data set, tens of MiB of freed heap sit
there, and a leak that fills them first leaves RSS flat (:func:`release_freed_heap`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import io
import linecache
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

MIB = 2**20


def release_freed_heap() -> bool:
    """Give the pages of freed heap memory back to the system (glibc's ``malloc_trim(0)``);
    ``False`` where the C library has no such call (macOS, musl).

    glibc serves allocations below its mmap threshold (128 KiB, raised up to 32 MiB each time a
    larger block is freed) from its heap, and keeps freed heap memory mapped and resident for
    reuse. A leak then fills that memory before RSS moves: measured here, the patient's set-up
    leaves up to ~75 MiB of it, and its leak (0.13 MiB a step) stayed invisible in RSS for up
    to ~500 steps. After ``malloc_trim(0)`` those pages are returned, so every page a step touches
    again counts in RSS, from the first step."""
    name = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    if trim is None:
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim(0)
    return True


def rss_mib() -> float:
    """This process's RSS now (MiB), as ``memory_usage`` reads it (psutil)."""
    import psutil

    return psutil.Process().memory_info().rss / MIB


def rss_timeline(
    fn: Callable[[], Any], interval_s: float = 0.02, marks: dict[str, float] | None = None
) -> tuple[list[dict[str, float]], Any, str]:
    """``memory_usage`` of ``fn()``: records ``{seconds, rss_mib}`` and ``(value, error)``.

    ``marks``: ``fn`` may put ``time.time()`` of named moments in it; they come back as
    seconds on the records' clock (the start of the steps, say)."""
    from memory_profiler import memory_usage

    box: dict[str, Any] = {"value": None, "error": ""}

    def guarded() -> None:
        try:
            box["value"] = fn()
        except Exception as exc:  # noqa: BLE001 - keep the samples taken before it raised
            box["error"] = f"{type(exc).__name__}: {exc}"

    samples = memory_usage((guarded, (), {}), interval=interval_s, timestamps=True)
    t0 = samples[0][1] if samples else time.time()
    records = [{"seconds": t - t0, "rss_mib": m} for m, t in samples]
    for name in marks or {}:
        marks[name] -= t0
    return records, box["value"], box["error"]


def ramp_mib_per_s(records: list[dict[str, float]]) -> float:
    """Least-squares slope of RSS over time (MiB/s) over the second half of the samples (the
    first half holds the warm-up, when allocators and caches grow once)."""
    half = records[len(records) // 2 :]
    if len(half) < 2:
        return 0.0
    ts = [r["seconds"] for r in half]
    ms = [r["rss_mib"] for r in half]
    tm, mm = sum(ts) / len(ts), sum(ms) / len(ms)
    var = sum((t - tm) ** 2 for t in ts)
    return sum((t - tm) * (m - mm) for t, m in zip(ts, ms, strict=True)) / var if var else 0.0


def line_memory(fn: Callable[[], Any], function: Callable) -> list[dict[str, Any]]:
    """``memory_profiler.LineProfiler`` on ``function`` while ``fn()`` runs: records with
    ``line``, ``rss_mib`` (RSS after the line, last time it ran), ``increment_mib`` (summed
    over all its runs), ``occurrences`` and ``source``."""
    from memory_profiler import LineProfiler

    prof = LineProfiler(backend="psutil")
    prof.add_function(function)
    prof.enable_by_count()
    try:
        fn()
    finally:
        prof.disable_by_count()
    records = []
    for filename, lines in prof.code_map.items():
        for lineno, mem in lines:
            source = linecache.getline(filename, lineno).rstrip()
            if not mem or source.lstrip().startswith("def "):
                continue  # the def line's "increment" is the whole RSS at the call
            increment, rss, occurrences = mem
            records.append(
                {
                    "line": lineno,
                    "rss_mib": rss,
                    "increment_mib": increment,
                    "occurrences": occurrences,
                    "source": source,
                }
            )
    return records


def line_memory_text(records: list[dict[str, Any]]) -> str:
    """The line table as memory_profiler prints it (for a cell that prints, not a pager)."""
    out = io.StringIO()
    out.write(f"{'line':>6} {'RSS MiB':>9} {'incr MiB':>9} {'runs':>6}  source\n")
    for r in records:
        out.write(
            f"{r['line']:>6} {r['rss_mib']:>9.1f} {r['increment_mib']:>9.1f} "
            f"{r['occurrences']:>6}  {r['source']}\n"
        )
    return out.getvalue()


def top_allocations(
    fn: Callable[[], Any], top: int = 10, frames: int = 1
) -> tuple[list[dict[str, Any]], float]:
    """``tracemalloc`` while ``fn()`` runs: the ``top`` sites still holding memory at the end
    (``site``, ``mib``, ``blocks``) and the traced peak (MiB). Python allocations only."""
    was = tracemalloc.is_tracing()
    if not was:
        tracemalloc.start(frames)
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.take_snapshot()
        fn()
        after = tracemalloc.take_snapshot()
        peak = tracemalloc.get_traced_memory()[1] / MIB
    finally:
        if not was:
            tracemalloc.stop()
    skip = [tracemalloc.Filter(False, tracemalloc.__file__)]
    diff = after.filter_traces(skip).compare_to(before.filter_traces(skip), "lineno")
    records = []
    for stat in diff[:top]:
        frame = stat.traceback[0]
        records.append(
            {
                "site": f"{frame.filename.rsplit('/', 1)[-1]}:{frame.lineno}",
                "source": linecache.getline(frame.filename, frame.lineno).strip(),
                "mib": stat.size_diff / MIB,
                "blocks": stat.count_diff,
            }
        )
    return records, peak


def leak_per_step_bytes(monitor: int = 256, seed: int = 0) -> int:
    """Bytes one step of the patient's ``leak`` fault keeps alive: the tensors autograd saves
    for the monitoring loss's backward (its activations), counted with ``saved_tensors_hooks``
    on the patient's model and a monitoring batch of the same shape; parameters and the batch
    itself are alive anyway and not counted."""
    import torch
    import torch.nn.functional as F

    from hpclab.profiling.patient import CLASSES, SIDE
    from hpclab.train import make_model

    model = make_model("tiny", in_features=SIDE * SIDE, classes=CLASSES, seed=seed)
    x, y = torch.randn(monitor, SIDE * SIDE), torch.randint(0, CLASSES, (monitor,))
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        F.cross_entropy(model(x), y)
    alive = {t.untyped_storage().data_ptr() for t in (x, y, *model.parameters())}
    return sum(n for ptr, n in saved.items() if ptr not in alive)
