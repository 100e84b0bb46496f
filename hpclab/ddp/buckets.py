"""Experiment ``ddp-buckets``: gradient bucket size vs step rate (chapter 06, tensor fusion).

Horovod's "tensor fusion" (Guan 2019) and DDP's ``bucket_cap_mb`` are one idea: every
all-reduce pays a latency ``alpha`` however small it is, so many small gradient tensors are
copied into a few big buckets and reduced together. One bucket per tensor pays ``alpha`` per
tensor; one huge bucket cannot start until the whole backward pass is done (no overlap).
DDP's default, 25 MB (plus a small 1 MiB first bucket, so the last layers' gradients can start
reducing while backward goes on), sits between.

The sweep builds a DDP replica per cap in one launch and interleaves the caps round by round,
so a busy machine slows all of them alike. Model ``deep`` (24 layers, 48 tensors) makes the
effect visible; the step is :func:`hpclab.train.train_step`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from hpclab.config import Config, param
from hpclab.display import figure, plural
from hpclab.dist import RankContext
from hpclab.measure.timing import time_fn
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.train import (
    MODELS,
    TrainSpec,
    batches,
    bucket_count,
    dataset,
    make_model,
    run_spec,
    train_step,
    wrap,
)


@dataclass(frozen=True)
class BucketConfig(Config):
    ranks: int = param(2, min=2, max=64, help="ranks")
    caps_mb: tuple = param(
        (0.0, 0.25, 1.0, 5.0, 25.0, 100.0),
        min=0.0,
        max=1024.0,
        help="bucket_cap_mb values (0: one bucket per parameter tensor)",
    )
    model: str = param("deep", choices=tuple(MODELS), help="model (deep: many small tensors)")
    batch_size: int = param(32, min=1, max=4096, help="batch per rank")
    steps: int = param(10, min=2, max=1000, quick=4, help="timed steps per cap and round")
    rounds: int = param(3, min=1, max=20, quick=2, help="interleaved rounds over the caps")


def bucket_worker(
    ctx: RankContext, spec: TrainSpec, caps: tuple[float, ...], rounds: int
) -> list[dict[str, Any]]:
    stream = batches(ctx, spec, dataset(spec))
    nets = {}
    for cap in caps:  # one replica per cap, all starting from the same weights
        model = make_model(spec.model, spec.side * spec.side, seed=spec.seed)
        net = wrap(ctx, model.to(ctx.device), cap)
        nets[cap] = (net, torch.optim.SGD(net.parameters(), lr=spec.lr))
    samples: dict[float, list[float]] = {cap: [] for cap in caps}
    total = rounds * len(caps)
    for rnd in range(rounds):
        for k, cap in enumerate(caps):
            net, opt = nets[cap]

            def step(net: Any = net, opt: Any = opt) -> None:
                train_step(net, opt, *next(stream))

            # warm-up: DDP rebuilds its buckets in execution order after the first step
            t = time_fn(
                step,
                device=ctx.device,
                warmup=2 if rnd == 0 else 1,
                repeat=spec.steps,
                max_time_s=float("inf"),
            )
            samples[cap].extend(t.samples_s)
            ctx.progress(rnd * len(caps) + k + 1, total, f"bucket_cap_mb={cap:g}")
    import statistics

    tensors = sum(1 for _ in nets[caps[0]][0].parameters())
    return [
        {
            "bucket_cap_mb": cap,
            "step_s": statistics.median(samples[cap]),
            "buckets": bucket_count(nets[cap][0]),
            "tensors": tensors,
        }
        for cap in caps
    ]


def run_buckets(config: BucketConfig, progress: Progress) -> Result:
    from hpclab.dist import place

    where = place(config.ranks)
    device = where.device
    progress.update(0, 1, where.note)
    spec = TrainSpec.sized(
        config.ranks, model=config.model, per_rank_batch=config.batch_size, steps=config.steps
    )
    outs = run_spec(
        spec,
        config.ranks,
        worker=bucket_worker,
        args=(tuple(config.caps_mb), config.rounds),
        device=device,
        progress=progress,
    )
    records = []
    for j, row in enumerate(outs[0]):
        step = max(o[j]["step_s"] for o in outs)
        records.append(
            {
                "tier": "live",
                "ranks": config.ranks,
                "model": config.model,
                **row,
                "step_s": step,
                "steps_per_s": 1.0 / step,
                "device": device,
            }
        )
    return make_result("ddp-buckets", config, records)


@figure
def plot_buckets(result: Result):
    import plotly.graph_objects as go

    rows = sorted(result.records, key=lambda r: r["bucket_cap_mb"])
    labels = [f"{r['bucket_cap_mb']:g} MB" if r["bucket_cap_mb"] else "per tensor" for r in rows]
    fig = go.Figure()
    fig.add_bar(
        x=labels,
        y=[r["steps_per_s"] for r in rows],
        name="steps/s",
        text=[f"{plural(r['buckets'], 'all-reduce')}/step" for r in rows],
    )
    fig.update_layout(
        title="DDP bucket_cap_mb (tensor fusion): steps/s, all-reduces per step",
        xaxis_title="bucket_cap_mb",
        yaxis_title="steps/s",
        height=400,
    )
    return fig
