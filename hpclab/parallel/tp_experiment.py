"""Experiment ``tensor-parallel``: one linear layer split by columns and by rows (chapter 06).

On every rank the same full layer ``nn.Linear(in, out)`` is built from one seed; the split
layers take their share of it. For each batch size the run checks the split layer against the
unsplit one (output ``y``, input gradient ``dx``, this rank's slice of ``dW``) and times one
forward + backward. Beside them, data parallel on the same layer: each rank holds the whole
layer, takes 1/p of the batch and all-reduces the weight and bias gradients.

Communication per step, bytes each rank sends in a ring (``model_bytes_per_rank``, checked
against what the code handed to its collectives, ``bytes_per_rank``)::

    data parallel  2(p-1)/p * 4 (in*out + out)                     grows with the layer
    column         (p-1) * 4 B out/p  +  2(p-1)/p * 4 B in          grows with the batch
    row            2(p-1)/p * 4 B out  +  (p-1) * 4 B in/p

so splitting a layer pays when its weights outweigh the activations of a batch (big layers,
small batches), and data parallel wins otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from hpclab.config import Config, ConfigError, param
from hpclab.display import figure
from hpclab.dist import RankContext, launch
from hpclab.dist.placement import DEVICES
from hpclab.measure.timing import time_fn
from hpclab.parallel.tensor_parallel import ColumnParallelLinear, CommTally, RowParallelLinear
from hpclab.progress import Progress
from hpclab.results import Result, make_result

MODES = ("column", "row", "dp")


@dataclass(frozen=True)
class TensorParallelConfig(Config):
    ranks: int = param(2, min=1, max=64, help="ranks sharing the layer")
    in_features: int = param(1024, min=1, max=16384, log=True, help="layer input features")
    out_features: int = param(1024, min=1, max=16384, log=True, help="layer output features")
    batch_sizes: tuple = param(
        (16, 64, 256, 1024), min=1, max=65536, quick=(16, 256), help="batches (rows of x)"
    )
    repeat: int = param(5, min=1, max=100, quick=3, help="timed forward+backward per point")
    device: str = param("auto", choices=DEVICES, help="GPUs if enough, else CPU")

    def check(self) -> None:
        for name in ("in_features", "out_features"):
            value = getattr(self, name)
            if value % self.ranks:
                raise ConfigError(
                    f"{name}={value} is not divisible by ranks={self.ranks}; allowed: multiples "
                    f"of {self.ranks}, e.g. {max(self.ranks, value // self.ranks * self.ranks)}"
                )
        for b in self.batch_sizes:
            if b % self.ranks:
                raise ConfigError(
                    f"batch_sizes contains {b}, not divisible by ranks={self.ranks} (data "
                    f"parallel splits the batch); allowed: multiples of {self.ranks}"
                )


def model_bytes_per_rank(mode: str, batch: int, d_in: int, d_out: int, p: int) -> float:
    """Ring bytes each rank sends per forward + backward (fp32), as in the module docstring."""
    if p < 2:
        return 0.0
    ar, ag = 2 * (p - 1) / p, p - 1  # all-reduce share of the payload; all-gather: slice x (p-1)
    if mode == "dp":
        return ar * 4 * (d_in * d_out + d_out)
    if mode == "column":
        return ag * 4 * batch * d_out / p + ar * 4 * batch * d_in
    if mode == "row":
        return ar * 4 * batch * d_out + ag * 4 * batch * d_in / p
    raise ValueError(f"mode={mode!r}; allowed: {', '.join(MODES)}")


def _dp_step(ctx: RankContext, layer: torch.nn.Linear, x, dy, tally: CommTally) -> None:
    """Data parallel on one layer: my 1/p of the batch, then average the gradients."""
    from hpclab.parallel.tensor_parallel import all_reduce_sum

    p = ctx.world_size
    mine, dmine = x.chunk(p)[ctx.rank], dy.chunk(p)[ctx.rank]
    layer.zero_grad(set_to_none=True)
    # the loss is the sum over the whole batch (dy given), so gradients add, not average
    F.linear(mine, layer.weight, layer.bias).backward(dmine)
    for t in (layer.weight.grad, layer.bias.grad):
        t.copy_(all_reduce_sum(t, tally))


def tp_worker(ctx: RankContext, cfg: TensorParallelConfig) -> list[dict[str, Any]]:
    rows = []
    total = len(cfg.batch_sizes) * len(MODES)
    for j, batch in enumerate(cfg.batch_sizes):
        torch.manual_seed(batch)  # the same layer and data on every rank
        full = torch.nn.Linear(cfg.in_features, cfg.out_features).to(ctx.device)
        x = torch.randn(batch, cfg.in_features, device=ctx.device)
        dy = torch.randn(batch, cfg.out_features, device=ctx.device)
        xr = x.clone().requires_grad_()
        y_ref = full(xr)
        y_ref.backward(dy)
        for k, mode in enumerate(MODES):
            tally = CommTally()
            errs = {"y": 0.0, "dx": 0.0, "dw": 0.0}
            if mode == "dp":
                layer = torch.nn.Linear(cfg.in_features, cfg.out_features).to(ctx.device)
                layer.load_state_dict(full.state_dict())
                _dp_step(ctx, layer, x, dy, tally)
                errs["dw"] = float((layer.weight.grad - full.weight.grad).abs().max())

                def step(layer=layer, tally=tally, x=x, dy=dy) -> None:
                    _dp_step(ctx, layer, x, dy, tally)
            else:
                if mode == "column":
                    layer = ColumnParallelLinear(full, gather_output=True, tally=tally)
                    dw_ref = full.weight.grad.chunk(ctx.world_size, dim=0)[ctx.rank]
                else:
                    layer = RowParallelLinear(full, input_is_split=False, tally=tally)
                    dw_ref = full.weight.grad.chunk(ctx.world_size, dim=1)[ctx.rank]
                xs = x.clone().requires_grad_()
                y = layer(xs)
                y.backward(dy)
                errs = {
                    "y": float((y - y_ref).abs().max()),
                    "dx": float((xs.grad - xr.grad).abs().max()),
                    "dw": float((layer.weight.grad - dw_ref).abs().max()),
                }

                def step(layer=layer, x=x, dy=dy) -> None:
                    xs = x.clone().requires_grad_()
                    layer.zero_grad(set_to_none=True)
                    layer(xs).backward(dy)

            sent = tally.ring_bytes_per_rank(ctx.world_size)  # one checked step's traffic
            t = time_fn(step, device=ctx.device, warmup=1, repeat=cfg.repeat, max_time_s=1e9)
            rows.append(
                {
                    "mode": mode,
                    "batch": batch,
                    "time_s": t.median_s,
                    "bytes_per_rank": sent,
                    "collectives": sum(tally.calls.values()) // (cfg.repeat + 2),
                    "param_bytes_per_rank": sum(
                        q.numel() * q.element_size() for q in layer.parameters()
                    ),
                    **{f"max_err_{k}": v for k, v in errs.items()},
                }
            )
            ctx.progress(j * len(MODES) + k + 1, total, f"batch {batch}: {mode}")
    return rows


def check_memory(config: TensorParallelConfig, device: str, progress: Progress) -> None:
    """Refuse before starting when the ranks cannot fit in memory: each holds the full layer
    for the equal-results check (weights, gradient, reference: 12 bytes per weight) and the
    largest batch's inputs and outputs with their gradients."""
    from hpclab.measure.oom import preflight

    d_in, d_out, b = config.in_features, config.out_features, max(config.batch_sizes)
    per_rank = 12 * d_in * d_out + 16 * b * (d_in + d_out)
    tensors = config.ranks * per_rank if device == "cpu" else 0
    advice = "use fewer ranks, fewer features or smaller batches"
    preflight(
        f"tensor parallelism on {config.ranks} ranks", tensors, config.ranks, advice, progress
    )


def run_tensor_parallel(config: TensorParallelConfig, progress: Progress) -> Result:
    from hpclab.dist import place

    where = place(config.ranks, config.device)
    device = where.device
    check_memory(config, device, progress)
    outs = launch(
        tp_worker, config.ranks, args=(config,), device=device, progress=progress, deadline_s=600
    )
    p, records = config.ranks, []
    for i, row in enumerate(outs[0]):
        same = [o[i] for o in outs]
        records.append(
            {
                "tier": "live",
                "ranks": p,
                "in_features": config.in_features,
                "out_features": config.out_features,
                **row,
                "time_s": max(r["time_s"] for r in same),
                **{k: max(r[k] for r in same) for k in ("max_err_y", "max_err_dx", "max_err_dw")},
                "model_bytes_per_rank": model_bytes_per_rank(
                    row["mode"], row["batch"], config.in_features, config.out_features, p
                ),
                "device": where.devices[0],  # where rank 0 ran ("cpu", "cuda:0")
            }
        )
    return make_result("tensor-parallel", config, records)


@figure
def plot_tensor_parallel(result: Result):
    """Bytes each rank sends per step (model lines, measured markers) and time, vs batch."""
    from plotly.subplots import make_subplots

    cfg = result.config
    fig = make_subplots(rows=1, cols=2, subplot_titles=("MB sent per rank per step", "ms per step"))
    names = {"column": "column-split", "row": "row-split", "dp": "data parallel"}
    for mode in MODES:
        rows = sorted((r for r in result.records if r["mode"] == mode), key=lambda r: r["batch"])
        x = [r["batch"] for r in rows]
        lo, hi = min(x), max(x)
        grid = [lo * (hi / lo) ** (k / 40) for k in range(41)] if hi > lo else x
        fig.add_scatter(
            x=grid,
            y=[
                model_bytes_per_rank(mode, b, cfg["in_features"], cfg["out_features"], cfg["ranks"])
                / 1e6
                for b in grid
            ],
            mode="lines",
            name=f"{names[mode]} (model)",
            legendgroup=mode,
            row=1,
            col=1,
        )
        fig.add_scatter(
            x=x,
            y=[r["bytes_per_rank"] / 1e6 for r in rows],
            mode="markers",
            marker={"size": 10},
            name=f"{names[mode]} (counted)",
            legendgroup=mode,
            row=1,
            col=1,
        )
        fig.add_scatter(
            x=x, y=[r["time_s"] * 1e3 for r in rows], mode="lines+markers",
            name=f"{names[mode]} (measured)", legendgroup=mode, row=1, col=2,
        )  # fmt: skip
    fig.update_xaxes(type="log", title="batch (rows of x)")
    fig.update_yaxes(type="log")
    fig.update_layout(
        title=f"One {cfg['in_features']}x{cfg['out_features']} layer on {cfg['ranks']} ranks: "
        "split the layer or split the batch?",
        height=420,
    )
    return fig
