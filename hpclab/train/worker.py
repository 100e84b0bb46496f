"""What each rank of a data-parallel run does (chapters 06 to 08: the course's one rank-side worker).

One worker, :func:`ddp_worker`, serves three purposes with one code path:

- with ``world_size > 1`` it trains a ``DistributedDataParallel`` replica per rank: a
  ``DistributedSampler`` deals every n-th sample of an epoch's shuffle to each rank,
  ``set_epoch`` reshuffles per epoch, ``bucket_cap_mb`` sets DDP's gradient buckets and
  ``micro_batches`` accumulates gradients under ``no_sync`` (one all-reduce per step);
- with one rank and no process group it is the serial reference (no DDP wrapper);
- it times the steps with :func:`hpclab.measure.timing.time_fn` and, beside them, the same
  step on a local copy without communication (``compute_s``) and one all-reduce of the
  gradient's size (``allreduce_s``), so a run can say where its time went;
- around the timed steps it measures the CPU share it got on its cores
  (:mod:`hpclab.measure.cpu_share`, its DataLoader workers counted as its own) and reports the
  cores it ran on, so a run screened beside others (chapter 08's autotuner) can be judged.

The knobs chapter 08 tunes are fields of :class:`TrainSpec` too: DataLoader ``loader_workers``
(chapter 04), ``dtype`` (bf16 under autocast) and ``memory_format`` (channels-last weights).

The step itself is :func:`hpclab.train.train_step`, the same one every chapter uses; the spec
is :class:`hpclab.train.TrainSpec`, and :func:`hpclab.train.run_spec` launches it.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import torch
from torch import nn

from hpclab.dist import RankContext
from hpclab.measure.cpu_share import measure_cpu_share
from hpclab.measure.sysinfo import usable_cpu_ids
from hpclab.measure.timing import time_fn
from hpclab.train.cost import Checkpointed, flops_per_sample
from hpclab.train.data import features_of, load
from hpclab.train.optim import make_optimizer, make_schedule
from hpclab.train.spec import TrainSpec
from hpclab.train.step import (
    flat_params,
    grad_scaler,
    make_model,
    parameter_count,
    train_step,
)

DDP_DEFAULT_MB = 25.0  # torch.nn.parallel.DistributedDataParallel's bucket_cap_mb default


def dataset(spec: TrainSpec) -> torch.utils.data.TensorDataset:
    """The spec's training samples, flat: X ``[samples, features]``, y ``[samples]`` (MNIST-like
    synthetic images by default; :data:`hpclab.train.data.DATASETS`)."""
    (x, y), _ = load(spec.data, spec.samples, 0, spec.side, spec.seed)
    return torch.utils.data.TensorDataset(x, y)


def batches(ctx: RankContext, spec: TrainSpec, data: torch.utils.data.Dataset):
    """Endless (x, y) batches for this rank: its share of each epoch, reshuffled per epoch."""
    from torch.utils.data import DataLoader, DistributedSampler

    # Explicit replicas/rank: works with no process group too (the serial reference).
    sampler = DistributedSampler(
        data, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=spec.seed
    )
    on_gpu = ctx.device.startswith("cuda")
    workers = spec.loader_workers
    loader = DataLoader(
        data,
        batch_size=spec.per_rank_batch,
        sampler=sampler,
        drop_last=True,
        pin_memory=on_gpu,
        num_workers=workers,
        persistent_workers=workers > 0,  # an epoch boundary does not restart them
        timeout=120 if workers else 0,  # a hung worker fails the rank instead of hanging it
    )
    epoch = 0
    while True:
        sampler.set_epoch(epoch)  # without it every epoch repeats epoch 0's order
        for x, y in loader:
            yield x.to(ctx.device, non_blocking=True), y.to(ctx.device, non_blocking=True)
        epoch += 1


def wrap(ctx: RankContext, model: nn.Module, bucket_cap_mb: float) -> nn.Module:
    """DDP around ``model`` when a process group exists; the bare model otherwise."""
    if not ctx.distributed:
        return model
    from torch.nn.parallel import DistributedDataParallel as DDP

    device_ids = [torch.device(ctx.device).index] if ctx.device.startswith("cuda") else None
    # A cap of ~1 byte puts every parameter tensor in its own bucket (no fusion at all).
    cap = bucket_cap_mb if bucket_cap_mb > 0 else 1e-6
    # 25 is DDP's default: pass None to keep the default's small (1 MiB) first bucket too, which
    # lets the last layers' gradients start reducing early; an explicit 25 would drop it.
    return DDP(model, device_ids=device_ids, bucket_cap_mb=None if cap == DDP_DEFAULT_MB else cap)


def replica_divergence(ctx: RankContext, model: nn.Module) -> float:
    """Largest |parameter - rank 0's parameter| over all ranks (0.0 means identical replicas)."""
    if not ctx.distributed:
        return 0.0
    import torch.distributed as dist

    mine = flat_params(model)
    ref = mine.clone()
    dist.broadcast(ref, src=0)
    diff = (mine - ref).abs().max().reshape(1)
    dist.all_reduce(diff, op=dist.ReduceOp.MAX)
    return float(diff)


def time_allreduce(ctx: RankContext, numel: int, repeat: int = 5) -> float:
    """Median seconds of one all-reduce of ``numel`` fp32 values (0.0 with one process)."""
    if not ctx.distributed:
        return 0.0
    import torch.distributed as dist

    buf = torch.zeros(numel, device=ctx.device)
    # No max_time_s: every rank must make the same number of calls or the collective hangs.
    t = time_fn(
        lambda: dist.all_reduce(buf),
        device=ctx.device,
        warmup=2,
        repeat=repeat,
        max_time_s=float("inf"),
    )
    return t.median_s


def build_replica(ctx: RankContext, spec: TrainSpec) -> tuple[nn.Module, nn.Module]:
    """This rank's model on its device, in the spec's memory format and with its blocks
    checkpointed if asked, and the module that trains it: DDP around it (:func:`wrap`) when a
    process group exists, the model itself otherwise. Returns ``(model, net)``."""
    model = make_model(spec.model, features_of(spec.data, spec.side), seed=spec.seed)
    model = model.to(ctx.device)
    if spec.memory_format == "channels_last":
        model = model.to(memory_format=torch.channels_last)
    if spec.checkpoint:
        model = Checkpointed(model, spec.checkpoint_every)
    return model, wrap(ctx, model, spec.bucket_cap_mb)


def compute_only_s(ctx: RankContext, spec: TrainSpec, model: nn.Module, stream) -> float:
    """Median seconds of the same step on a private copy of ``model``: no DDP hooks, no
    all-reduce, no waiting for peers (what a step would cost without communication)."""
    local = copy.deepcopy(model)
    local_opt = make_optimizer(spec.optimizer, local.parameters(), spec.lr)
    local_scaler = grad_scaler(ctx.device, spec.dtype)

    def local_step() -> None:
        x, y = next(stream)
        train_step(
            local,
            local_opt,
            x,
            y,
            micro_batches=spec.micro_batches,
            dtype=spec.dtype,
            scaler=local_scaler,
        )

    seconds = time_fn(
        local_step, device=ctx.device, warmup=2, repeat=spec.steps, max_time_s=float("inf")
    ).median_s
    ctx.barrier()
    return seconds


def ddp_worker(ctx: RankContext, spec: TrainSpec) -> dict[str, Any]:
    """Train ``spec.warmup + spec.steps`` steps on this rank; return timings and checks."""
    data = dataset(spec)
    model, net = build_replica(ctx, spec)
    opt = make_optimizer(spec.optimizer, net.parameters(), spec.lr)
    scaler = grad_scaler(ctx.device, spec.dtype)
    stream = batches(ctx, spec, data)
    losses: list[float] = []
    first_step_at: list[float] = []
    total, k = spec.warmup + spec.steps, spec.micro_batches
    schedule = make_schedule(spec.schedule, opt, max(1, spec.warmup) + spec.steps, spec.lr_warmup)

    def step() -> None:
        if not first_step_at:
            first_step_at.append(time.time())
        x, y = next(stream)
        losses.append(train_step(net, opt, x, y, micro_batches=k, dtype=spec.dtype, scaler=scaler))
        if schedule is not None:
            schedule.step()
        ctx.progress(len(losses), total, f"step {len(losses)}/{total}")

    # Deterministic call count on every rank (no time limit): collectives must pair up.
    with measure_cpu_share(descendants=True) as share:
        timing = time_fn(
            step,
            device=ctx.device,
            warmup=max(1, spec.warmup),
            repeat=spec.steps,
            max_time_s=float("inf"),
        )
    out: dict[str, Any] = {
        **rank_fields(ctx),
        "step_samples_s": timing.samples_s,
        "step_s": timing.median_s,
        "step_s_iqr": timing.iqr_s,
        "step_s_min": timing.min_s,
        "step_s_max": timing.max_s,
        "cpus": usable_cpu_ids(),
        "cpu_share": share.value.to_dict(),
        "first_step_at": first_step_at[0],
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "lr_last": opt.param_groups[0]["lr"],  # the rate after the schedule's last step
        "loss_scale": scaler.get_scale() if scaler is not None else 1.0,
        **replica_fields(ctx, spec, model, net),
    }
    if spec.return_params:
        out["flat_params"] = flat_params(net).cpu()
    out["compute_s"] = timing.median_s
    if spec.measure_compute and ctx.distributed:
        out["compute_s"] = compute_only_s(ctx, spec, model, stream)
    out["allreduce_s"] = time_allreduce(ctx, out["params"]) if spec.measure_allreduce else 0.0
    return out


def rank_fields(ctx: RankContext) -> dict[str, Any]:
    """Who this rank was: the first fields of every rank's record."""
    return {"rank": ctx.rank, "device": ctx.device, "backend": ctx.backend, "threads": ctx.threads}


def replica_fields(ctx: RankContext, spec: TrainSpec, model: nn.Module, net: nn.Module) -> dict:
    """What a rank's record says of its replica: parameters, FLOPs per sample, DDP's gradient
    buckets and ``params_max_diff`` (:func:`replica_divergence`: a collective, so every rank
    calls this at the same point of its run)."""
    return {
        "params": parameter_count(model),
        "flops_per_sample": flops_per_sample(model, features_of(spec.data, spec.side)),
        "buckets": bucket_count(net),
        "params_max_diff": replica_divergence(ctx, net),
    }


def bucket_count(net: nn.Module) -> int:
    """Gradient buckets DDP all-reduced per step (after its rebuild at step 1); 0 without DDP."""
    getter = getattr(net, "_get_ddp_logging_data", None)
    if getter is None:
        return 0
    data = getter()
    return int(data.get("num_buckets_reduced") or len(str(data.get("bucket_sizes", "")).split(",")))
