"""The floating-point floor of "equal weights" (chapter 09 part 2, §2).

Floating-point addition is not associative: summing N ranks' gradients in another order may
change the last bit of the sum when N >= 3 (two numbers add the same either way round, so 1 or
2 ranks have no other order). DDP's ring all-reduce, FSDP2's reduce-scatter and HSDP's two-level
reduction each sum in their own order, and Adam then divides by sqrt(v): where a gradient nearly
cancels, a last-bit difference becomes a visible one, and steps compound it. So the difference
between two strategies is compared with :func:`floor_params`: DDP's arithmetic (each gradient
divided by N, summed over the ranks, the same Adam) with the sum taken from the last rank to the
first. Measured on this course's 2-core machine, 4 ranks, width 512, depth 8, Adam: after 13
steps DDP against DDP with 1 MiB buckets instead of 25 MiB differs by 1.4e-5, as much as ZeRO-3
does; summing the gathered gradients from rank 3 down differs by 1.4e-5 too, from rank 0 up by
2.2e-6 (so "within 10x the floor"); with plain SGD all are below 1.9e-9 (weights of ~0.04
have an ulp of ~4e-9); on 2 ranks all are 0. In the experiment (14 steps) the floor and
ZeRO-3's and HSDP's differences are all 2.6e-5.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from hpclab.dist import RankContext
from hpclab.train.optim import make_optimizer
from hpclab.train.step import flat_params, train_step

TOLERANCE = 1e-5  # fp32 weights after ~10 Adam steps, where the order of the sum changes nothing
FLOOR_FACTOR = 10  # two orders of one sum end a few times apart, not orders of magnitude


def equal_weights(diff: float, floor: float) -> bool:
    """Whether two runs' weights ``diff`` apart are equal up to the order of a sum: within
    :data:`TOLERANCE`, or within :data:`FLOOR_FACTOR` x the measured ``floor`` (a bug, such as
    a sum not divided by N or another rank's initial weights, moves them by ~lr a step)."""
    return diff <= max(TOLERANCE, FLOOR_FACTOR * floor)


def reversed_mean(model: nn.Module) -> None:
    """``after_backward``: every gradient replaced by its mean over the ranks, summed from the
    last rank to the first (one all-gather per parameter: ``world x`` its size, briefly)."""
    import torch.distributed as dist

    n = dist.get_world_size()
    for p in model.parameters():
        parts = [torch.empty_like(p.grad) for _ in range(n)]
        dist.all_gather(parts, p.grad.div(n))  # DDP divides each rank's gradient first
        total = parts[-1]
        for g in reversed(parts[:-1]):
            total = total + g
        p.grad.copy_(total)


def floor_params(
    ctx: RankContext, spec: Any, build: Callable[[], nn.Module], stream: Any, steps: int
) -> torch.Tensor | None:
    """The weights after ``steps`` of DDP's arithmetic with the ranks' gradients summed in
    reverse order (``build()`` gives the same fresh model DDP started from; ``stream`` the same
    batches). ``None`` below 3 ranks: there is no other order (a + b == b + a exactly)."""
    if ctx.world_size < 3:
        return None
    model = build().to(ctx.device)
    opt = make_optimizer(spec.optimizer, model.parameters(), spec.lr)
    for _ in range(steps):
        train_step(model, opt, *next(stream), after_backward=reversed_mean)
    return flat_params(model)
