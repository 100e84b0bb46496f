"""Train to a target validation accuracy: steps, epochs and time to accuracy (chapter 06).

:func:`target_worker` is the rank-side worker of a run with ``spec.target_acc`` (``hpclab run
ddp --target-acc A``, ``hpclab run large-batch``): it trains on the spec's data set, measures
the held-out split every ``val_every`` steps (0: once per epoch), and stops at the first
validation that reaches the target, or after ``spec.steps`` steps, saying it never got there.
On N ranks each rank scores its share of the validation split and one all-reduce sums the
counts, so every rank sees the same accuracy and stops at the same step.

``time_to_target_s`` counts the training steps only (validation is a measurement, and how often
it runs is ours to choose); every step is counted from the first (no untimed warm-up: the
first steps' cost is part of the time to accuracy).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from hpclab.dist import RankContext
from hpclab.train.data import features_of, load
from hpclab.train.optim import make_optimizer, make_schedule
from hpclab.train.spec import TrainSpec
from hpclab.train.step import make_model, parameter_count, train_step
from hpclab.train.worker import (
    batches,
    rank_fields,
    replica_fields,
    time_allreduce,
    wrap,
)

GRID = 1.05  # a run to a target validates when the step count has grown by 5 %
# Called at each validation: probe(model, step, x_train, y_train).
Probe = Callable[[nn.Module, int, torch.Tensor, torch.Tensor], None]


@torch.no_grad()
def val_accuracy(ctx: RankContext, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Accuracy on the whole split: each rank scores every world_size-th sample, counts summed."""
    model.eval()
    mine = slice(ctx.rank, None, ctx.world_size)
    xs, ys = x[mine].to(ctx.device), y[mine].to(ctx.device)
    right = torch.tensor([float((model(xs).argmax(dim=1) == ys).sum())], device=ctx.device)
    model.train()
    if ctx.distributed:
        import torch.distributed as dist

        dist.all_reduce(right)
    return float(right) / len(x)


def validation_grid(steps: int) -> set[int]:
    """Steps 1, 2, ... each at least :data:`GRID` times the one before, up to ``steps``."""
    out, k = set(), 1
    while k <= steps:
        out.add(k)
        k = max(k + 1, math.ceil(k * GRID))
    return out


def steps_per_epoch(spec: TrainSpec, ranks: int) -> int:
    return spec.samples // (spec.per_rank_batch * ranks)


def train_to_target(ctx: RankContext, spec: TrainSpec, probe: Probe | None = None) -> dict:
    """Train until the target or ``spec.steps``; ``probe(model, step, x, y)`` runs at each
    validation (the noise-scale measurement)."""
    (x, y), (xv, yv) = load(spec.data, spec.samples, spec.val_samples, spec.side, spec.seed)
    model = make_model(spec.model, features_of(spec.data, spec.side), seed=spec.seed)
    net = wrap(ctx, model.to(ctx.device), spec.bucket_cap_mb)
    opt = make_optimizer(spec.optimizer, net.parameters(), spec.lr)
    schedule = make_schedule(spec.schedule, opt, spec.steps, spec.lr_warmup)
    stream = batches(ctx, spec, torch.utils.data.TensorDataset(x, y))
    per_epoch = steps_per_epoch(spec, ctx.world_size)
    every = spec.val_every or per_epoch
    grid = validation_grid(spec.steps) if spec.target_acc else set()
    curve: list[dict[str, float]] = []
    times: list[float] = []
    reached: int | None = None
    first_step_at = time.time()
    loss = float("nan")
    for k in range(1, spec.steps + 1):
        t0 = time.perf_counter()
        xb, yb = next(stream)
        loss = train_step(net, opt, xb, yb, micro_batches=spec.micro_batches)
        if schedule is not None:
            schedule.step()
        times.append(time.perf_counter() - t0)
        if k % every and k != spec.steps and k not in grid:
            continue
        acc = val_accuracy(ctx, net, xv, yv)
        curve.append({"step": k, "epoch": k / per_epoch, "val_acc": acc, "train_s": sum(times)})
        if probe is not None:
            probe(model, k, x, y)
        ctx.progress(k, spec.steps, f"step {k}: validation accuracy {acc:.3f}")
        if spec.target_acc and acc >= spec.target_acc:
            reached = k
            break
    return {
        **rank_fields(ctx),
        "first_step_at": first_step_at,
        "step_s": statistics.median(times),
        "step_s_iqr": _iqr(times),
        "compute_s": statistics.median(times),
        "allreduce_s": time_allreduce(ctx, parameter_count(model))
        if spec.measure_allreduce
        else 0.0,
        "loss_first": float("nan"),
        "loss_last": loss,
        "lr_last": opt.param_groups[0]["lr"],
        **replica_fields(ctx, spec, model, net),  # after the all-reduce above, on every rank
        **target_fields(curve, reached, times, per_epoch),
    }


def target_fields(
    curve: list[dict[str, float]], reached: int | None, times: list[float], per_epoch: int
) -> dict[str, Any]:
    """What a run to a target says of it: the validation ``curve``, whether and when (steps,
    epochs, training seconds) it ``reached`` the target."""
    return {
        "steps_per_epoch": per_epoch,
        "curve": curve,
        "val_acc_last": curve[-1]["val_acc"],
        "reached": reached is not None,
        "steps_to_target": reached,
        "epochs_to_target": reached / per_epoch if reached else None,
        "time_to_target_s": sum(times) if reached else None,
        "train_s": sum(times),
    }


def target_worker(ctx: RankContext, spec: TrainSpec, noise_every: int = 0) -> dict[str, Any]:
    """:func:`train_to_target` as a rank-side worker for :func:`hpclab.train.run_spec`; with
    ``noise_every`` > 0, one process measures the gradient noise scale at every
    ``noise_every``-th validation (:class:`hpclab.train.noise.NoiseScale`): ``b_simple``."""
    if not noise_every:
        return train_to_target(ctx, spec)
    from hpclab.train.noise import NoiseScale

    noise, gen, seen = NoiseScale(), torch.Generator().manual_seed(spec.seed), [0]

    def probe(model: nn.Module, step: int, x: torch.Tensor, y: torch.Tensor) -> None:
        seen[0] += 1
        if seen[0] % noise_every == 0:
            noise.measure(model, x.to(ctx.device), y.to(ctx.device), gen)

    return train_to_target(ctx, spec, probe) | {"b_simple": noise.b_simple}


def _iqr(xs: list[float]) -> float:
    if len(xs) < 4:
        return 0.0
    q = statistics.quantiles(xs, n=4)
    return q[2] - q[0]
