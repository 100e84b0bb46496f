"""Experiment ``parallel-memory``: bytes per rank under data, pipeline and tensor parallel (ch. 06).

Why model parallelism exists at all: with data parallel every rank holds the whole model, its
gradients and its optimizer state; only the activations shrink with the batch share. When that
does not fit on one GPU, the model itself must be split.

The model is a tower of ``blocks`` MLP blocks ``d -> 4d -> d`` (the MLP of a transformer layer,
Megatron-LM's unit of tensor parallelism). Per block, in fp32 (4 bytes), with Adam (two state
tensors per parameter), for a batch of ``B`` samples on ``p`` ranks::

    parameters   P_blk = 8 d^2 + 5 d                (two weights and two biases)
    activations  4 B (d + 4d) = 20 B d              (what autograd saves: the first layer's
                                                     input, the ReLU's output = the second
                                                     layer's input)
    data parallel      4 P + 4 P + 8 P   + 20 (B/p) d per block      (whole model, 1/p batch)
    pipeline (GPipe)   (4 + 4 + 8) P / p + 20 B d per block of its 1/p of the blocks
                       (all m micro-batches in flight; 1F1B keeps p - r of m on rank r)
    tensor parallel    weights and biases split except the second bias (d, replicated);
                       activations 4 B (d + 4d/p): each rank keeps the whole block input

Every rank of a real run builds its share, trains one step with Adam and measures the bytes of
its parameters, gradients, optimizer state and saved activations (a
``saved_tensors_hooks`` pack hook, each tensor counted once). The records hold both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from hpclab.config import Config, ConfigError, param
from hpclab.display import figure
from hpclab.dist import RankContext
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.train import run_spec

STRATEGIES = ("data", "pipeline-gpipe", "pipeline-1f1b", "tensor")


@dataclass(frozen=True)
class MemoryConfig(Config):
    ranks: int = param(2, min=1, max=16, help="ranks")
    blocks: int = param(4, min=1, max=64, help="MLP blocks d -> 4d -> d")
    width: int = param(256, min=8, max=8192, log=True, help="d, the block's width")
    batch_size: int = param(64, min=1, max=65536, log=True, help="global batch")
    micro_batches: int = param(8, min=1, max=256, help="pipeline micro-batches")

    def check(self) -> None:
        for name, value in (
            ("blocks", self.blocks),
            ("batch_size", self.batch_size),
            ("width", self.width),
        ):
            if value % self.ranks:
                raise ConfigError(
                    f"{name}={value} is not divisible by ranks={self.ranks}; "
                    f"allowed: multiples of {self.ranks}"
                )
        if self.batch_size % self.micro_batches:
            raise ConfigError(
                f"batch_size={self.batch_size} is not divisible by micro_batches="
                f"{self.micro_batches}; allowed: a divisor of the batch"
            )


def block(d: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d, 4 * d), nn.ReLU(), nn.Linear(4 * d, d))


def tower(blocks: int, d: int, seed: int = 0) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(*[block(d) for _ in range(blocks)])


def model_bytes(strategy: str, cfg: MemoryConfig, rank: int = 0) -> dict[str, float]:
    """The module docstring's formulas: bytes on rank ``rank``, by kind."""
    p, d, b, m, n = cfg.ranks, cfg.width, cfg.batch_size, cfg.micro_batches, cfg.blocks
    blk = 8 * d * d + 5 * d
    if strategy == "data":
        params, act = n * blk, n * 20 * (b // p) * d
    elif strategy.startswith("pipeline"):
        params = n // p * blk
        alive = m if strategy == "pipeline-gpipe" else min(p - rank, m)
        act = n // p * 20 * (b // m) * d * alive
    elif strategy == "tensor":
        params = n * ((8 * d * d + 4 * d) // p + d)
        act = n * 4 * b * (d + 4 * d // p)
    else:
        raise ValueError(f"strategy={strategy!r}; allowed: {', '.join(STRATEGIES)}")
    return {"params": 4 * params, "grads": 4 * params, "optimizer": 8 * params, "activations": act}


class SavedBytes:
    """Counts the bytes autograd saves for backward (each tensor once, parameters excluded)."""

    def __init__(self, module: nn.Module) -> None:
        self.skip = {q.data_ptr() for q in module.parameters()}
        self.seen: set[tuple[int, int]] = set()
        self.bytes = 0

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        key = (t.data_ptr(), t.numel())
        if t.data_ptr() not in self.skip and key not in self.seen:
            self.seen.add(key)
            self.bytes += t.numel() * t.element_size()
        return t

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t)


def _tensor_bytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def _tp_tower(cfg: MemoryConfig) -> nn.Sequential:
    from hpclab.parallel.tensor_parallel import ColumnParallelLinear, RowParallelLinear

    full = tower(cfg.blocks, cfg.width)
    parts = []
    for blk in full:
        parts += [
            ColumnParallelLinear(blk[0], gather_output=False),
            nn.ReLU(),
            RowParallelLinear(blk[2], input_is_split=True),
        ]
    return nn.Sequential(*parts)


def _share(ctx: RankContext, strategy: str, cfg: MemoryConfig) -> tuple[nn.Module, int, int]:
    """(this rank's module, samples per micro-batch, micro-batches it keeps alive)."""
    p, b, m = ctx.world_size, cfg.batch_size, cfg.micro_batches
    if strategy == "data":
        return tower(cfg.blocks, cfg.width), b // p, 1
    if strategy == "tensor":
        return _tp_tower(cfg), b, 1
    per = cfg.blocks // p
    stage = tower(cfg.blocks, cfg.width)[ctx.rank * per : (ctx.rank + 1) * per]
    alive = m if strategy == "pipeline-gpipe" else min(p - ctx.rank, m)
    return stage, b // m, alive


def memory_worker(ctx: RankContext, cfg: MemoryConfig) -> list[dict[str, Any]]:
    rows = []
    for strategy in STRATEGIES:
        module, rows_per, alive = _share(ctx, strategy, cfg)
        opt = torch.optim.Adam(module.parameters(), lr=1e-3)
        saved = SavedBytes(module)
        outs = []
        torch.manual_seed(ctx.rank)
        for _ in range(alive):  # the micro-batches this rank holds at its peak
            x = torch.randn(rows_per, cfg.width, requires_grad=strategy.startswith("pipeline"))
            with saved.hooks():
                outs.append(module(x))
        sum(o.mean() for o in outs).backward()
        opt.step()
        params = list(module.parameters())
        state = [t for q in params for t in opt.state[q].values() if t.shape == q.shape]
        rows.append(
            {
                "strategy": strategy,
                "rank": ctx.rank,
                "params": _tensor_bytes(params),
                "grads": _tensor_bytes(q.grad for q in params),
                "optimizer": _tensor_bytes(state),
                "activations": saved.bytes,
            }
        )
    return rows


def run_memory(config: MemoryConfig, progress: Progress) -> Result:
    # the probe's "spec" is its own config; run_spec's preload does Adam's first-step import
    # (torch._dynamo) once here, not in every rank
    outs = run_spec(config, config.ranks, worker=memory_worker, device="cpu", progress=progress)
    records = []
    for rows in outs:
        for row in rows:
            model = model_bytes(row["strategy"], config, row["rank"])
            for kind in ("params", "grads", "optimizer", "activations"):
                records.append(
                    {
                        "tier": "live",
                        "strategy": row["strategy"],
                        "rank": row["rank"],
                        "ranks": config.ranks,
                        "kind": kind,
                        "bytes": row[kind],
                        "model_bytes": model[kind],
                    }
                )
    return make_result("parallel-memory", config, records)


@figure
def plot_memory(result: Result):
    """Stacked bytes per rank (rank 0) by kind and strategy, the model's total as a marker."""
    import plotly.graph_objects as go

    rows = [r for r in result.records if r["rank"] == 0]
    fig = go.Figure()
    for kind in ("params", "grads", "optimizer", "activations"):
        mine = [r for r in rows if r["kind"] == kind]
        fig.add_bar(
            x=[r["strategy"] for r in mine], y=[r["bytes"] / 2**20 for r in mine], name=kind
        )
    totals: dict[str, float] = {}
    for r in rows:
        totals[r["strategy"]] = totals.get(r["strategy"], 0.0) + r["model_bytes"] / 2**20
    fig.add_scatter(
        x=list(totals), y=list(totals.values()), mode="markers", name="model (total)",
        marker={"symbol": "line-ew-open", "size": 40, "color": "black"},
    )  # fmt: skip
    cfg = result.config
    fig.update_layout(
        barmode="stack",
        title=f"Memory of rank 0 of {cfg['ranks']}: {cfg['blocks']} blocks of width "
        f"{cfg['width']}, batch {cfg['batch_size']}, Adam",
        yaxis_title="MiB",
        height=420,
    )
    return fig
