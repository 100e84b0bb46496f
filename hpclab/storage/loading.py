"""Experiments ``loader`` and ``data-wait``: a real DataLoader over each format (chapter 04).

``loader`` sweeps format x batch size x ``num_workers`` x ``pin_memory`` and reports samples/s
and the seconds to load 100 batches, the shape of Fox et al. 2015's Caffe table (AlexNet on ImageNet:
LMDB 1.05 s vs image files 8.1 s at batch 8, 5.23 s vs 62.4 s at batch 64), which the plot puts
beside it.

``data-wait`` trains (``hpclab.train``: ``make_model`` + ``train_step``) and splits every step
into *waiting for the next batch* and *computing*: Caffe's "Waiting for data" log lines from
Mao 2017, as a number per step. A fast format keeps the waiting near zero; a slow one starves the
model, and more workers (or a better format) is the cure.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from hpclab.config import Config, param
from hpclab.dist.placement import DEVICES, place
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.storage.data import parse_shape
from hpclab.storage.dataset import FORMATS
from hpclab.train import MLP_MODELS


def _indices(n: int, needed: int, shuffle: bool, seed: int) -> list[int]:
    """``needed`` indices: whole permutations (or 0..n-1 runs) back to back, then trimmed."""
    rng = np.random.default_rng(seed)
    runs = -(-needed // n)
    parts = [rng.permutation(n) if shuffle else np.arange(n) for _ in range(runs)]
    return np.concatenate(parts)[:needed].tolist()


class _Repeat:
    """An IterableDataset repeated until ``needed`` samples were produced (for shard streams)."""

    def __init__(self, stream: Any, epochs: int) -> None:
        self.stream, self.epochs = stream, epochs

    def __iter__(self):
        for _ in range(self.epochs):
            yield from self.stream


def make_loader(
    path: Any,
    batch_size: int,
    workers: int = 0,
    pin_memory: bool = False,
    shuffle: bool = True,
    batches: int = 100,
    seed: int = 0,
    persistent_workers: bool = False,
    prefetch_factor: int | None = None,
    **reader_kwargs: Any,
):
    """A ``torch.utils.data.DataLoader`` over the dataset at ``path`` for ``batches`` batches.

    Map-style formats get an explicit index list (random or sequential). Shards stream in order
    (``shuffle`` is ignored: sharded data is shuffled by shard and buffer, not by index).
    ``persistent_workers`` and ``prefetch_factor`` (batches in flight per worker; PyTorch's
    default 2) apply only with ``workers > 0``, as in PyTorch.
    """
    from torch.utils.data import DataLoader, IterableDataset

    from hpclab.storage.dataset import read_manifest
    from hpclab.storage.pack import open_dataset
    from hpclab.storage.shards_format import ShardStream

    needed = batch_size * batches
    common = {
        "batch_size": batch_size,
        "num_workers": workers,
        "pin_memory": pin_memory,
        # A worker that hangs must not hang the notebook: fail after 120 s instead.
        "timeout": 120 if workers else 0,
    }
    if workers:
        common["persistent_workers"] = persistent_workers
        common["prefetch_factor"] = prefetch_factor
    if read_manifest(path).format == "shards":
        stream = ShardStream(path)
        epochs = -(-needed // len(stream)) + 1
        ds = type("RepeatedShards", (_Repeat, IterableDataset), {})(stream, epochs)
        return DataLoader(ds, **common)
    ds = open_dataset(path, **reader_kwargs)
    return DataLoader(ds, sampler=_indices(len(ds), needed, shuffle, seed), **common)


def time_loader(loader: Any, batches: int) -> dict[str, float]:
    """Seconds to the first batch (worker start-up) and for the next ``batches`` batches."""
    t0 = time.perf_counter()
    it = iter(loader)
    first = next(it)
    t_first = time.perf_counter() - t0
    n = 0
    t1 = time.perf_counter()
    for _ in range(batches - 1):
        x, _ = next(it)
        n += len(x)
    elapsed = time.perf_counter() - t1
    del it  # shuts the workers down now
    return {"first_batch_s": t_first, "seconds": elapsed, "samples": n + 0 * len(first[0])}


@dataclass(frozen=True)
class LoaderConfig(Config):
    format: tuple = param(("lmdb", "files-png"), choices=FORMATS, help="formats to compare")
    path: str = param("", help="a packed dataset ('' = synthetic data packed in scratch)")
    samples: int = param(20000, min=64, max=2_000_000, quick=1000, help="samples in the dataset")
    shape: tuple = param((3, 32, 32), min=1, max=4096, help="C,H,W of each sample")
    batch_size: tuple = param(
        (8, 16, 32, 64), min=1, max=65536, help="batch sizes (Fox et al. 2015's)"
    )
    workers: tuple = param((0, 2), min=0, max=64, help="DataLoader num_workers values")
    pin_memory: bool = param(False, help="pinned host memory (only with a GPU; said when not)")
    batches: int = param(100, min=3, max=100_000, quick=20, help="batches per measurement")
    shuffle: bool = param(True, help="random order (False: sequential)")
    seed: int = param(0, min=0, max=2**31 - 1, help="data and order seed")

    def check(self) -> None:
        parse_shape(self.shape)


def run_loader(config: LoaderConfig, progress: Progress) -> Result:
    from hpclab.storage.read_experiment import path_format
    from hpclab.storage.workspace import resolve

    shape = parse_shape(config.shape)
    paths = {f: resolve(config.path, f, config.samples, shape, config.seed) for f in config.format}
    if config.path:
        paths = {path_format(config.path, config.format): paths[config.format[0]]}
    # pinning helps only the copy to a GPU: placement decides, and says when it is not possible
    pin, pin_note = place(1, "auto").pin_memory(config.pin_memory)
    if pin_note:
        progress.update(0, 1, pin_note)
    cases = [(f, b, w) for f in paths for b in config.batch_size for w in config.workers]
    records = []
    for k, (fmt, bs, w) in enumerate(cases):
        progress.update(k, len(cases), f"{fmt} batch {bs} workers {w}")
        loader = make_loader(paths[fmt], bs, w, pin, config.shuffle, config.batches, config.seed)
        t = time_loader(loader, config.batches)
        per_batch = t["seconds"] / (config.batches - 1)
        records.append(
            {
                "format": fmt,
                "batch_size": bs,
                "workers": w,
                "pin_memory": pin,
                "samples_per_s": t["samples"] / t["seconds"],
                "seconds_per_100_batches": 100 * per_batch,
                "first_batch_s": t["first_batch_s"],
                "seconds": t["seconds"],
                "batches": config.batches - 1,
                **({"pin_note": pin_note} if pin_note else {}),
            }
        )
    progress.update(len(cases), len(cases), pin_note)
    return make_result("loader", config, records)


@dataclass(frozen=True)
class WaitConfig(Config):
    format: tuple = param(("memmap", "files-png"), choices=FORMATS, help="a fast and a slow format")
    samples: int = param(20000, min=64, max=2_000_000, quick=1000, help="samples in the dataset")
    shape: tuple = param((3, 32, 32), min=1, max=4096, help="C,H,W of each sample")
    batch_size: int = param(64, min=1, max=65536, help="batch size")
    workers: int = param(0, min=0, max=64, help="DataLoader num_workers")
    steps: int = param(60, min=3, max=100_000, quick=25, help="training steps per format")
    model: str = param("tiny", choices=MLP_MODELS, help="hpclab.train model (MLP)")
    open_latency_ms: float = param(0.0, min=0.0, max=1000.0, help="simulated per-file open latency")
    device: str = param("auto", choices=DEVICES, help="where the model trains (auto: a GPU if any)")

    def check(self) -> None:
        parse_shape(self.shape)


def run_wait(config: WaitConfig, progress: Progress, on_step=None) -> Result:
    """Train ``config.steps`` steps per format; ``on_step(record)`` sees each step as it ends
    (the live monitor in :mod:`hpclab.widgets.wait_monitor` draws with it)."""
    from hpclab.storage.workspace import prepared
    from hpclab.train import train_step

    where = place(1, config.device)
    device, on_gpu = where.devices[0], where.device == "cuda"
    shape = parse_shape(config.shape)
    features = int(np.prod(shape))
    records: list[dict[str, Any]] = []
    total = len(config.format) * config.steps
    for k, fmt in enumerate(config.format):
        path = prepared(fmt, config.samples, shape)
        kw = {"open_latency_ms": config.open_latency_ms} if fmt.startswith("files") else {}
        pin, _ = where.pin_memory()  # pinned when the batches go to a GPU
        loader = make_loader(
            path, config.batch_size, config.workers, pin, True, config.steps + 1, **kw
        )
        model, opt = _warm_model(config, features, device)
        steps = []
        it = iter(loader)
        for step in range(config.steps + 1):  # step 0 starts the workers: a warm-up, not counted
            t0 = time.perf_counter()
            x, y = next(it)
            t1 = time.perf_counter()
            x = x.to(device, non_blocking=True).float().div_(255).flatten(1)
            train_step(model, opt, x, y.to(device, non_blocking=True))  # returns a float: synced
            t2 = time.perf_counter()
            if step:
                steps.append((t1 - t0, t2 - t1))
                rec = {"kind": "step", "format": fmt, "step": step}
                records.append({**rec, "wait_s": t1 - t0, "compute_s": t2 - t1})
                if on_step is not None:
                    on_step(records[-1])
                progress.update(k * config.steps + step, total, f"{fmt}: step {step}")
        del it
        records.append(_summary(config, fmt, device, steps, on_gpu))
    progress.update(total, total, "")
    return make_result("data-wait", config, records)


def _warm_model(config: WaitConfig, features: int, device: str) -> tuple[Any, Any]:
    """A fresh model and its SGD optimizer on ``device``, past the slow first steps of a
    process (allocation, lazy init) on random batches."""
    import torch

    from hpclab.train import make_model, train_step

    model = make_model(config.model, in_features=features).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    warm_x = torch.rand(config.batch_size, features, device=device)
    warm_y = torch.zeros(config.batch_size, dtype=torch.long, device=device)
    for _ in range(3):
        train_step(model, opt, warm_x, warm_y)
    return model, opt


def _summary(
    config: WaitConfig, fmt: str, device: str, steps: list[tuple[float, float]], on_gpu: bool
) -> dict[str, Any]:
    """One format's record: the share of the time spent waiting for data, from its steps'
    (wait, compute) seconds."""
    import torch

    wait = sum(s[0] for s in steps)
    busy = sum(s[1] for s in steps)
    util = None
    if on_gpu:
        try:
            util = torch.cuda.utilization()  # NVML, when pynvml is installed
        except Exception:  # noqa: BLE001 - no NVML: leave it out
            util = None
    return {
        "kind": "summary",
        "format": fmt,
        "device": device,
        "workers": config.workers,
        "batch_size": config.batch_size,
        "steps": len(steps),
        "wait_fraction": wait / (wait + busy),
        "samples_per_s": len(steps) * config.batch_size / (wait + busy),
        "step_ms": 1e3 * statistics.median(a + b for a, b in steps),
        "gpu_utilization_pct": util,
    }
