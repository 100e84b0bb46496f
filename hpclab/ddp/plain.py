"""The loop people write for one GPU, the reference chapter 06's ``ddp`` run is held to.

Same work as :func:`hpclab.train.ddp_worker` on one rank, by construction: the same
:class:`~hpclab.train.TrainSpec` (so the same samples, epochs and batch size), the same
batches (:func:`~hpclab.train.batches`: a DataLoader on the host, ``pin_memory`` on a GPU,
each batch copied to the device with ``non_blocking=True`` inside the step), the same
:func:`hpclab.train.train_step` (its ``loss.item()`` waits for the GPU), the same warm-up and
number of steps. Only the clock differs, on purpose: ``perf_counter`` between two
``torch.cuda.synchronize()`` calls, where hpclab uses CUDA events (:func:`hpclab.measure.timing.time_fn`).
``benchmarks/ddp_gpu.py`` compares the two at batch 256 and 2048.
"""

from __future__ import annotations

import statistics
import time

import torch

from hpclab.dist import RankContext
from hpclab.train import TrainSpec, batches, dataset, make_model, train_step


def plain_loop(ctx: RankContext, spec: TrainSpec) -> dict[str, float]:
    """``step_s``: median seconds per step of ``spec`` on ``ctx.device``, timed the plain way;
    ``loss_first``/``loss_last``: the first and last step's loss (equal to ``ddp_worker``'s on
    the same spec: the proof that both did the same work)."""
    model = make_model(spec.model, spec.side**2, seed=spec.seed).to(ctx.device)
    opt = torch.optim.SGD(model.parameters(), lr=spec.lr)
    stream = batches(ctx, spec, dataset(spec))
    sync = torch.cuda.synchronize if ctx.device.startswith("cuda") else (lambda: None)
    times, losses = [], []
    for i in range(max(1, spec.warmup) + spec.steps):
        sync()
        t0 = time.perf_counter()
        x, y = next(stream)
        losses.append(train_step(model, opt, x, y))
        sync()
        if i >= max(1, spec.warmup):
            times.append(time.perf_counter() - t0)
    return {"step_s": statistics.median(times), "loss_first": losses[0], "loss_last": losses[-1]}
