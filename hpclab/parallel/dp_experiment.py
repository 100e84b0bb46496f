"""Experiment ``dp-by-hand``: naive and bucketed hand-written data parallel vs DDP (chapter 06).

Every rank builds one replica per implementation from the same seed and feeds all of them the
same batches (its :class:`~torch.utils.data.DistributedSampler` share), trained by the one step
:func:`hpclab.train.train_step`:

1. **Equal weights.** ``check_steps`` steps on an identical batch sequence; the replicas of the
   three implementations must end equal (``max_diff_vs_ddp``), and on one rank (no process group,
   the wrappers then do nothing) the run is the serial reference the tests compare with.
2. **Step time.** The implementations take turns, round by round (a busy machine slows all of
   them alike), timed by :func:`hpclab.measure.timing.time_fn`; beside each, the same step on a
   private copy with no communication (``compute_s``), so ``exposed_comm_s = step_s - compute_s``
   is the communication that did *not* hide behind backward. ``blocked_s`` is the time the
   hand-written wrappers spent blocked in communication per step (naive: every all-reduce;
   bucketed: only the final wait).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import torch

from hpclab.config import Config, param
from hpclab.display import figure
from hpclab.dist import RankContext
from hpclab.dist.placement import DEVICES
from hpclab.measure.timing import time_fn
from hpclab.parallel.data_parallel import BucketedDataParallel, NaiveDataParallel
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.train import (
    MLP_MODELS,
    TrainSpec,
    batches,
    bucket_count,
    dataset,
    flat_params,
    make_model,
    parameter_count,
    run_spec,
    train_step,
    wrap,
)

IMPLS = ("naive", "bucketed", "ddp")


@dataclass(frozen=True)
class DPByHandConfig(Config):
    impl: tuple = param(IMPLS, choices=IMPLS, help="implementations, side by side")
    ranks: int = param(2, min=1, max=64, help="ranks (GPUs, or CPU processes standing in)")
    model: str = param("large", choices=MLP_MODELS, help="model (deep: 48 small tensors)")
    batch_size: int = param(64, min=1, max=4096, help="batch per rank")
    bucket_cap_mb: float = param(25.0, min=0.01, max=1024.0, help="bucket size (bucketed, ddp)")
    steps: int = param(20, min=2, max=1000, quick=5, help="timed steps per impl and round")
    rounds: int = param(3, min=1, max=20, quick=2, help="interleaved rounds over the impls")
    check_steps: int = param(6, min=1, max=100, quick=3, help="steps of the equal-weights check")
    device: str = param("auto", choices=DEVICES, help="GPUs if enough, else CPU")


def make_replica(ctx: RankContext, impl: str, spec: TrainSpec, cap_mb: float) -> torch.nn.Module:
    """One replica of ``spec.model`` (same seed, same weights on every rank) wrapped by ``impl``."""
    model = make_model(spec.model, spec.side * spec.side, seed=spec.seed).to(ctx.device)
    if impl == "naive":
        return NaiveDataParallel(model)
    if impl == "bucketed":
        return BucketedDataParallel(model, bucket_cap_mb=cap_mb)
    if impl == "ddp":
        return wrap(ctx, model, cap_mb)
    raise ValueError(f"impl={impl!r}; allowed: {', '.join(IMPLS)}")


def _messages(net: torch.nn.Module) -> int:
    """All-reduces per step: one per tensor (naive), one per bucket (bucketed, ddp)."""
    if isinstance(net, NaiveDataParallel):
        return len(net.params)
    if isinstance(net, BucketedDataParallel):
        return len(net.buckets)
    return bucket_count(net)


def dp_worker(
    ctx: RankContext, spec: TrainSpec, impls: tuple[str, ...], cap_mb: float, rounds: int
) -> dict[str, Any]:
    stream = batches(ctx, spec, dataset(spec))
    # 1. the same batches for every implementation: their weights must end equal
    fixed = [next(stream) for _ in range(spec.warmup)]
    nets, finals = {}, {}
    for impl in impls:
        net = make_replica(ctx, impl, spec, cap_mb)
        opt = torch.optim.SGD(net.parameters(), lr=spec.lr)
        for x, y in fixed:
            train_step(net, opt, x, y)
        finals[impl] = flat_params(net).cpu()
        nets[impl] = (net, opt)
    out: dict[str, Any] = {
        "rank": ctx.rank,
        "device": ctx.device,
        "backend": ctx.backend,
        "messages": {impl: _messages(nets[impl][0]) for impl in impls},
    }
    if spec.return_params:
        out["flat_params"] = finals
    if rounds:  # rounds=0: the equal-weights check only
        out["rows"] = _time_steps(ctx, spec, nets, stream, rounds)
    return out


def _time_steps(ctx: RankContext, spec: TrainSpec, nets: dict, stream: Any, rounds: int) -> dict:
    """Median step and blocked time per implementation, and of a comm-free copy (``compute``)."""
    local = make_model(spec.model, spec.side * spec.side, seed=spec.seed).to(ctx.device)
    nets = {**nets, "compute": (local, torch.optim.SGD(local.parameters(), lr=spec.lr))}
    samples: dict[str, list[float]] = {k: [] for k in nets}
    blocked: dict[str, float] = dict.fromkeys(nets, 0.0)
    total = rounds * len(nets)
    for rnd in range(rounds):
        for k, (name, (net, opt)) in enumerate(nets.items()):
            before = getattr(net, "blocked_s", 0.0)

            def step(net: Any = net, opt: Any = opt) -> None:
                train_step(net, opt, *next(stream))

            t = time_fn(step, device=ctx.device, warmup=1, repeat=spec.steps, max_time_s=1e9)
            samples[name].extend(t.samples_s)
            blocked[name] += getattr(net, "blocked_s", 0.0) - before
            ctx.progress(rnd * len(nets) + k + 1, total, f"round {rnd + 1}: {name}")
    calls = rounds * (spec.steps + 1)
    return {
        name: {"step_s": statistics.median(samples[name]), "blocked_s": blocked[name] / calls}
        for name in nets
    }


def run_dp_by_hand(config: DPByHandConfig, progress: Progress) -> Result:
    from hpclab.dist import place

    device = place(config.ranks, config.device).device
    spec = TrainSpec.sized(
        config.ranks,
        model=config.model,
        per_rank_batch=config.batch_size,
        steps=config.steps,
        warmup=config.check_steps,
        return_params=True,
    )
    impls = tuple(dict.fromkeys(config.impl))
    outs = run_spec(
        spec,
        config.ranks,
        worker=dp_worker,
        args=(impls, config.bucket_cap_mb, config.rounds),
        device=device,
        progress=progress,
    )
    compute = max(o["rows"]["compute"]["step_s"] for o in outs)
    ref = "ddp" if "ddp" in impls else impls[0]
    records = []
    for impl in impls:
        step = max(o["rows"][impl]["step_s"] for o in outs)  # the slowest rank sets the pace
        mine = [o["flat_params"][impl] for o in outs]
        records.append(
            {
                "tier": "live",
                "impl": impl,
                "ranks": config.ranks,
                "model": config.model,
                "params": parameter_count(make_model(config.model, spec.side * spec.side)),
                "per_rank_batch": config.batch_size,
                "device": outs[0]["device"],
                "backend": outs[0]["backend"],
                "step_s": step,
                "compute_s": compute,
                "exposed_comm_s": max(0.0, step - compute),
                "blocked_s": max(o["rows"][impl]["blocked_s"] for o in outs),
                "allreduces_per_step": outs[0]["messages"][impl],
                "samples_per_s": config.batch_size * config.ranks / step,
                "params_max_diff": max(float((m - mine[0]).abs().max()) for m in mine),
                "max_diff_vs_ddp": float((mine[0] - outs[0]["flat_params"][ref]).abs().max()),
            }
        )
    for r in records:
        r["vs_" + ref] = r["step_s"] / next(x["step_s"] for x in records if x["impl"] == ref)
    return make_result("dp-by-hand", config, records)


@figure
def plot_dp_by_hand(result: Result):
    """Step time per implementation, split into compute and exposed communication."""
    import plotly.graph_objects as go

    rows = [r for r in result.records if r["tier"] == "live"]
    x = [f"{r['impl']} ({r['allreduces_per_step']} all-reduces)" for r in rows]
    fig = go.Figure()
    fig.add_bar(x=x, y=[r["compute_s"] * 1e3 for r in rows], name="compute (no communication)")
    fig.add_bar(
        x=x, y=[r["exposed_comm_s"] * 1e3 for r in rows], name="exposed communication + waiting"
    )
    fig.update_layout(
        barmode="stack",
        title=f"Data parallel by hand vs DDP: step time on {rows[0]['ranks'] if rows else '?'} "
        f"ranks ({rows[0]['model'] if rows else ''} model)",
        yaxis_title="ms per step",
        height=400,
    )
    return fig
