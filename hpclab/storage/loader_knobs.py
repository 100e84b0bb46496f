"""Experiment ``loader-knobs`` (chapter 04): the DataLoader's ``persistent_workers``,
``prefetch_factor`` and ``pin_memory``, each measured.

- ``persistent_workers``: without it, every epoch (every ``iter(loader)``) starts
  ``num_workers`` new processes and ends them at the epoch's end. The first batch of each epoch
  waits for the start-up. With it, the workers (and their open file handles, LMDB environments,
  decoded caches) survive from one epoch to the next. Records of ``kind="epoch"`` give the first
  batch's wait per epoch, the whole epoch's time and the workers' process ids.
- ``prefetch_factor``: batches each worker keeps in flight (PyTorch's default is 2). Against a
  slow source (image files with a simulated open latency) and a consumer that leaves the CPU free
  (a sleep standing in for a GPU step), it decides how much of the source's jitter the queue
  hides. It adds no throughput once the source is the bottleneck. Records of ``kind="prefetch"``
  give samples/s and the wait per batch.
- ``pin_memory``: decided by placement (:meth:`hpclab.dist.placement.Placement.pin_memory`):
  pinned only when the batches go to a GPU. On a CPU the record says why not.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

from hpclab.config import Config, param
from hpclab.display import figure
from hpclab.dist.placement import place
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.storage.loading import make_loader
from hpclab.storage.workspace import prepared

SHAPE = (3, 32, 32)


@dataclass(frozen=True)
class KnobsConfig(Config):
    workers: int = param(2, min=1, max=64, help="DataLoader num_workers")
    batch_size: int = param(64, min=1, max=65536, quick=32, help="samples per batch")
    batches: int = param(20, min=3, max=100_000, quick=8, help="batches per epoch")
    epochs: int = param(
        4, min=2, max=100, quick=3, help="epochs with and without persistent workers"
    )
    prefetch_factor: tuple = param((1, 2, 4), min=1, max=64, help="batches in flight per worker")
    open_latency_ms: float = param(
        0.5, min=0.0, max=1000.0, help="the slow source: simulated latency per file opened"
    )
    compute_ms: float = param(
        5.0, min=0.0, max=10_000.0, help="consumer's time per batch (a sleep: a GPU step)"
    )
    pin_memory: bool = param(True, help="pin batches when they go to a GPU (said when not)")


def _epoch(it_source: Any, compute_s: float) -> dict[str, Any]:
    """One epoch of ``it_source`` (a DataLoader): first batch's wait, total wait, wall time."""
    t0 = time.perf_counter()
    it = iter(it_source)
    first = next(it)
    first_s = time.perf_counter() - t0
    pids = sorted(w.pid for w in getattr(it, "_workers", []))  # the worker processes now
    waits, n = [], len(first[0])
    time.sleep(compute_s)
    while True:
        t1 = time.perf_counter()
        try:
            x, _ = next(it)
        except StopIteration:
            break
        waits.append(time.perf_counter() - t1)
        n += len(x)
        time.sleep(compute_s)
    epoch_s = time.perf_counter() - t0
    del it
    return {
        "first_batch_s": first_s,
        "wait_s_per_batch": statistics.fmean(waits) if waits else 0.0,
        "epoch_s": epoch_s,
        "samples": n,
        "samples_per_s": n / epoch_s,
        "worker_pids": pids,
    }


def run_knobs(config: KnobsConfig, progress: Progress) -> Result:
    pin, pin_note = place(1, "auto").pin_memory(config.pin_memory)
    compute_s = config.compute_ms / 1e3
    fast = prepared("memmap", config.batch_size * config.batches, SHAPE)
    slow = prepared("files-png", config.batch_size * config.batches, SHAPE)
    total = 2 * config.epochs + len(config.prefetch_factor)
    common = {"workers": config.workers, "pin_memory": pin, "batches": config.batches}
    records: list[dict[str, Any]] = []
    done = 0
    for persistent in (False, True):
        loader = make_loader(fast, config.batch_size, persistent_workers=persistent, **common)
        for epoch in range(config.epochs):
            progress.update(done, total, f"persistent_workers={persistent}: epoch {epoch + 1}")
            rec = _epoch(loader, compute_s)
            records.append(
                {"kind": "epoch", "persistent_workers": persistent, "epoch": epoch, **rec}
            )
            done += 1
        del loader  # persistent workers end with their loader
    for factor in config.prefetch_factor:
        progress.update(done, total, f"prefetch_factor={factor} against the slow source")
        loader = make_loader(
            slow, config.batch_size, prefetch_factor=factor,
            open_latency_ms=config.open_latency_ms, **common,
        )  # fmt: skip
        rec = _epoch(loader, compute_s)
        rec.pop("worker_pids")
        records.append({"kind": "prefetch", "prefetch_factor": factor, **rec})
        done += 1
    for r in records:
        r.update(workers=config.workers, batch_size=config.batch_size, pin_memory=pin)
        if pin_note:
            r["pin_note"] = pin_note
    progress.update(total, total, pin_note)
    return make_result("loader-knobs", config, records)


def startup_summary(result: Result) -> list[dict[str, Any]]:
    """Per setting of ``persistent_workers``: the first batch's wait in the first epoch and,
    on average, in the later ones (where persistent workers are already running)."""
    out = []
    for persistent in (False, True):
        rows = [r for r in result.records if r.get("persistent_workers") is persistent]
        if rows:
            later = [r["first_batch_s"] for r in rows if r["epoch"] > 0]
            out.append(
                {
                    "persistent_workers": persistent,
                    "first_epoch_first_batch_s": rows[0]["first_batch_s"],
                    "later_epochs_first_batch_s": statistics.fmean(later),
                    "worker_sets": len({tuple(r["worker_pids"]) for r in rows}),
                }
            )
    return out


@figure
def plot_knobs(result: Result):
    """Left: the first batch's wait per epoch, with and without persistent workers. Right:
    samples/s and wait per batch against the slow source, by prefetch_factor."""
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=1,
        cols=2,
        subplot_titles=("first batch of each epoch (worker start-up)", "slow source: prefetch"),
    )
    for persistent in (False, True):
        rows = [r for r in result.records if r.get("persistent_workers") is persistent]
        fig.add_scatter(
            x=[r["epoch"] + 1 for r in rows],
            y=[1e3 * r["first_batch_s"] for r in rows],
            mode="lines+markers",
            name=f"persistent_workers={persistent}",
            row=1,
            col=1,
        )
    pre = [r for r in result.records if r["kind"] == "prefetch"]
    fig.add_bar(
        x=[str(r["prefetch_factor"]) for r in pre],
        y=[1e3 * r["wait_s_per_batch"] for r in pre],
        name="wait per batch (ms)",
        row=1,
        col=2,
    )
    fig.update_xaxes(title_text="epoch", dtick=1, row=1, col=1)
    fig.update_yaxes(title_text="ms", rangemode="tozero", row=1, col=1)
    fig.update_xaxes(title_text="prefetch_factor", row=1, col=2)
    fig.update_yaxes(title_text="ms waiting per batch", row=1, col=2)
    fig.update_layout(title="DataLoader knobs", height=400)
    return fig
