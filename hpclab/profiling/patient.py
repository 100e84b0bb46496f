"""The patient: one slow training script with switchable faults (chapter 03).

Every fault is something students really write. Each one changes only *how* the work is done,
never *what* is computed, so the healthy run and every faulty run end with the same loss (the
tests check it); only time and memory differ. The model, the data and the training step are the
course's own (:mod:`hpclab.train`): a ``tiny`` MLP on MNIST-like 28x28 images.

The data are stored *encoded* (one ``bytes`` record per sample, as a file or an LMDB value
would hold them) and decoded on the fly: pixel ``b`` becomes ``(b / 255 - MEAN) / STD``.
The slow path decodes one sample at a time with a Python loop over its 784 pixels; the fixed
path decodes a whole batch with one numpy expression (``__getitems__``). Both compute the same
float64 expression and round it to float32, so the tensors are bit-identical.

Shapes: a batch is ``x [batch, 784]`` float32 and ``y [batch]`` int64.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, RandomSampler

from hpclab.config import ConfigError
from hpclab.train import forward_backward, make_model, synthetic_images

# What each fault does, in the words the chapter uses.
FAULTS: dict[str, str] = {
    "slow-data": "per-sample Python decoding in __getitem__ (a loop over 784 pixels)",
    "item-sync": "loss.item() every step (on a GPU: the CPU waits for the queue to drain)",
    "leak": "total_loss += loss on a loss never backpropagated: every step's graph stays alive",
    "cpu-tensors": "class weights rebuilt from a Python list on the CPU and copied every step",
    "threads": "oversubscribed intra-op threads (4 x the usable cores)",
}
MEAN, STD = 0.5, 0.25  # the normalisation both decoders apply
SIDE = 28
CLASSES = 10


def parse_faults(value: str | tuple | list) -> tuple[str, ...]:
    """``"none"``, ``"all"``, ``"slow-data,leak"`` or a tuple -> a tuple of known fault names."""
    items = value.split(",") if isinstance(value, str) else list(value)
    names = [str(v).strip() for v in items if str(v).strip()]
    if names in ([], ["none"]):
        return ()
    if names == ["all"]:
        return tuple(FAULTS)
    for name in names:
        if name not in FAULTS:
            raise ConfigError(
                f"fault={name!r} is not known; allowed: none, all, {', '.join(FAULTS)}"
            )
    return tuple(dict.fromkeys(names))


class EncodedImages(Dataset):
    """Samples stored as raw uint8 bytes; ``__getitem__`` decodes one in pure Python (slow)."""

    def __init__(self, samples: int, seed: int = 0) -> None:
        x, y = synthetic_images(samples, (1, SIDE, SIDE), seed=seed)
        pixels = (x * 255).round().to(torch.uint8).reshape(samples, -1).numpy()
        self.raw = [row.tobytes() for row in pixels]  # what a file read would return
        self.labels = y.tolist()

    def __len__(self) -> int:
        return len(self.raw)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        pixels = [(b / 255.0 - MEAN) / STD for b in self.raw[i]]  # 784 Python floats
        return torch.tensor(pixels, dtype=torch.float32), self.labels[i]

    def decode_batch(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """The fixed decoder: one numpy expression for the whole batch (same values)."""
        buf = np.frombuffer(b"".join(self.raw[i] for i in indices), dtype=np.uint8)
        x = ((buf.reshape(len(indices), -1) / 255.0 - MEAN) / STD).astype(np.float32)
        return torch.from_numpy(x), torch.tensor([self.labels[i] for i in indices])

    def class_weights(self) -> list[float]:
        """Inverse class frequency (the loss weights), as a Python list."""
        counts = np.bincount(np.asarray(self.labels), minlength=CLASSES).astype(np.float64)
        return (counts.sum() / (CLASSES * np.maximum(counts, 1))).tolist()


class BatchedImages(EncodedImages):
    """The fixed dataset: the DataLoader asks for a whole batch at once (``__getitems__``)."""

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        return self.decode_batch(indices)


def _whole_batch(batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    return batch  # __getitems__ already returns the collated batch


def make_loader(
    faults: tuple[str, ...],
    samples: int,
    batch: int,
    workers: int,
    seed: int,
    dataset_cls: type | None = None,
):
    """The DataLoader of the patient: the same sample order for any faults and workers.

    ``dataset_cls`` replaces the dataset (an exercise's own ``EncodedImages`` subclass); one
    with ``__getitems__`` returns whole batches, which the loader passes on as they are."""
    cls = dataset_cls or (EncodedImages if "slow-data" in faults else BatchedImages)
    ds = cls(samples, seed=seed)
    batched = callable(getattr(cls, "__getitems__", None))
    n_workers = workers
    sampler = RandomSampler(ds, generator=torch.Generator().manual_seed(seed))
    loader = DataLoader(
        ds,
        batch_size=batch,
        sampler=sampler,
        drop_last=True,
        num_workers=n_workers,
        collate_fn=_whole_batch if batched else None,
        multiprocessing_context="fork" if n_workers else None,
        prefetch_factor=4 if n_workers else None,
        persistent_workers=bool(n_workers),  # forked once, not once per epoch
    )
    return ds, loader


def batches(loader: DataLoader, steps: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """``steps`` batches, going round the data as many times as needed.

    The first epoch's iterator is made here, before the first batch is asked for: with workers
    that is when they are forked (~0.1 s each), so :func:`train` starts its clock after it."""
    done = 0
    it = iter(loader)
    yield None  # type: ignore[misc]  # the workers are up; the caller starts the clock
    while True:
        for xb, yb in it:
            yield xb, yb
            done += 1
            if done == steps:
                return
        it = iter(loader)  # next epoch (persistent workers are reused)


def phase(name: str, on: bool) -> contextlib.AbstractContextManager:
    """A ``torch.profiler.record_function`` range when ``on`` (a named band in the trace)."""
    return torch.profiler.record_function(name) if on else contextlib.nullcontext()


@dataclass
class PatientRun:
    """What one run of the patient measured."""

    faults: tuple[str, ...]
    steps: int
    batch: int
    seconds: float
    final_loss: float  # loss of the last training step
    monitor_loss: float  # mean loss on the held-out monitoring batch, over all steps
    threads: int
    workers: int
    step_losses: list[float] = field(default_factory=list)

    @property
    def samples_per_s(self) -> float:
        return self.steps * self.batch / self.seconds


def train(
    faults: str | tuple = (),
    steps: int = 200,
    batch: int = 64,
    samples: int = 4096,
    workers: int = 0,
    monitor: int = 256,
    device: str = "cpu",
    seed: int = 0,
    on_step: Callable[[int], None] | None = None,
    ranges: bool = False,
    dataset_cls: type | None = None,
    monitor_fn: Callable | None = None,
    before_steps: Callable[[], None] | None = None,
) -> PatientRun:
    """Train the patient for ``steps`` steps with the named faults switched on.

    Each step: one SGD step on a batch (``hpclab.train.forward_backward`` + ``optimizer.step``),
    then the loss on a fixed held-out monitoring batch of ``monitor`` samples is added to a
    running total (healthy: under ``torch.no_grad()``; ``leak``: with its graph).

    ``workers`` is a knob, not a fault: DataLoader worker processes pay only when decoding a
    batch costs more than handing it between processes (measured in the chapter: they can help
    the slow decoder, given free cores, and slow down the vectorised one), so the healthy run
    uses 0.
    ``on_step(i)`` is called after each step (progress, cancel, ``prof.step()``); ``ranges``
    labels the phases (data, forward+backward, optimizer, logging) for torch.profiler.
    ``dataset_cls`` and ``monitor_fn(model, loss_fn, x, y) -> loss`` swap in an exercise's
    dataset and monitoring-loss code. ``before_steps()`` is called once when the data, model and
    workers are ready, just before the first step and the clock (a memory tool marks the start
    of the steps there, and hands back what the set-up freed).
    """
    faults = parse_faults(faults)
    from hpclab.dist.placement import torch_threads
    from hpclab.measure.sysinfo import usable_cores

    cores = usable_cores()
    n_workers = workers
    # A tiny MLP on batches of 64 gains nothing from intra-op threads (chapter 01), and on a
    # shared node spinning OpenMP threads are what suffers first: one thread when healthy.
    threads = 4 * cores if "threads" in faults else 1
    with torch_threads(threads):
        ds, loader = make_loader(faults, samples, batch, workers, seed, dataset_cls)
        model = make_model("tiny", in_features=SIDE * SIDE, classes=CLASSES, seed=seed).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        weights_list = ds.class_weights()
        weights = torch.tensor(weights_list, dtype=torch.float32, device=device)
        xm, ym = (t.to(device) for t in ds.decode_batch(list(range(min(monitor, samples)))))
        step_losses: list = []
        total_loss = torch.zeros((), device=device)
        stream = batches(loader, steps)
        next(stream)  # workers forked before the clock starts
        if before_steps is not None:
            before_steps()
        t0 = time.perf_counter()
        for i in range(steps):
            with phase("data", ranges):
                xb, yb = next(stream)
                xb, yb = xb.to(device), yb.to(device)
                if "cpu-tensors" in faults:  # rebuilt on the host and copied, every step
                    weights = torch.tensor(weights_list, dtype=torch.float32).to(device)
            loss_fn = functools.partial(F.cross_entropy, weight=weights)
            with phase("forward+backward", ranges):
                opt.zero_grad(set_to_none=True)
                loss = forward_backward(model, xb, yb, loss_fn)
            with phase("optimizer", ranges):
                opt.step()
            with phase("logging", ranges):
                step_losses.append(loss.item() if "item-sync" in faults else loss)
                if monitor_fn is not None:
                    total_loss += monitor_fn(model, loss_fn, xm, ym)
                elif "leak" in faults:
                    total_loss += loss_fn(model(xm), ym)  # the graph of every step stays alive
                else:
                    with torch.no_grad():
                        total_loss += loss_fn(model(xm), ym)
            if on_step is not None:
                on_step(i + 1)
        losses = [float(v) for v in torch.stack([torch.as_tensor(v) for v in step_losses]).cpu()]
        seconds = time.perf_counter() - t0
        del stream, loader  # shuts persistent workers down now, not at garbage collection
    return PatientRun(
        faults=faults,
        steps=steps,
        batch=batch,
        seconds=seconds,
        final_loss=losses[-1],
        monitor_loss=float(total_loss.detach()) / steps,
        threads=threads,
        workers=n_workers,
        step_losses=losses,
    )
