"""Tensor parallelism of one linear layer, by columns and by rows (chapter 06, part 2).

A linear layer ``y = x W^T + b`` with ``W [out, in]`` is split across p ranks, each holding
1/p of ``W`` (the layer itself is split, not the batch: every rank sees the whole batch).

- **Column-parallel** (split the output features, ``W`` by rows): rank r holds ``W[rows_r]``
  and computes its slice ``y_r = x W_r^T + b_r`` ``[B, out/p]``; an *all-gather* joins the
  slices into ``y [B, out]``. In backward, each rank's ``dx`` covers only its columns of ``y``:
  an *all-reduce* sums them.
- **Row-parallel** (split the input features, ``W`` by columns): rank r holds ``W[:, cols_r]``
  and multiplies its slice of ``x`` into a partial sum ``[B, out]``; an *all-reduce* adds the
  partial sums, then the bias is added once.

Megatron-LM (Shoeybi et al. 2019) puts a column-parallel layer before a row-parallel one, so
the pair needs one all-reduce forward and one backward; the autograd functions below are its
"f" (:class:`CopyToRanks`) and "g" (:class:`ReduceFromRanks`), plus the gather and scatter of a
layer used on its own. A :class:`CommTally` counts the bytes handed to each collective.
Everything also runs with one process and no process group (the collectives are then identities).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class CommTally:
    """Collective calls and payload bytes (the tensor handed to the call), by collective."""

    calls: Counter = field(default_factory=Counter)
    payload_bytes: Counter = field(default_factory=Counter)

    def add(self, kind: str, t: torch.Tensor) -> None:
        self.calls[kind] += 1
        self.payload_bytes[kind] += t.numel() * t.element_size()

    def ring_bytes_per_rank(self, world: int) -> float:
        """Bytes each rank sends in a ring: 2(p-1)/p of an all-reduce's payload, (p-1) times
        an all-gather's (each rank's slice travels to p-1 others)."""
        if world < 2:
            return 0.0
        ar = self.payload_bytes["all_reduce"] * 2 * (world - 1) / world
        return ar + self.payload_bytes["all_gather"] * (world - 1)


def _group() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def all_reduce_sum(t: torch.Tensor, tally: CommTally | None) -> torch.Tensor:
    import torch.distributed as dist

    if _group()[1] > 1:
        t = t.contiguous()
        if tally is not None:
            tally.add("all_reduce", t)
        dist.all_reduce(t)
    return t


def _all_gather_last(t: torch.Tensor, tally: CommTally | None) -> torch.Tensor:
    """Concatenate every rank's ``[..., k]`` slice into ``[..., p*k]`` (rank order)."""
    import torch.distributed as dist

    world = _group()[1]
    if world == 1:
        return t
    t = t.contiguous()
    if tally is not None:
        tally.add("all_gather", t)
    parts = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(parts, t)
    return torch.cat(parts, dim=-1)


def _my_slice_last(t: torch.Tensor) -> torch.Tensor:
    rank, world = _group()
    return t.chunk(world, dim=-1)[rank].contiguous()


class CopyToRanks(torch.autograd.Function):
    """Forward: identity (every rank has the whole input). Backward: all-reduce the gradient."""

    @staticmethod
    def forward(ctx, x, tally):
        ctx.tally = tally
        return x

    @staticmethod
    def backward(ctx, grad):
        return all_reduce_sum(grad.clone(), ctx.tally), None


class ReduceFromRanks(torch.autograd.Function):
    """Forward: all-reduce the partial sums. Backward: identity (the gradient is replicated)."""

    @staticmethod
    def forward(ctx, x, tally):
        return all_reduce_sum(x.clone(), tally)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class GatherColumns(torch.autograd.Function):
    """Forward: all-gather the output slices. Backward: keep this rank's slice of the gradient."""

    @staticmethod
    def forward(ctx, x, tally):
        return _all_gather_last(x, tally)

    @staticmethod
    def backward(ctx, grad):
        return _my_slice_last(grad), None


class ScatterColumns(torch.autograd.Function):
    """Forward: keep this rank's slice of the input. Backward: all-gather the gradient slices."""

    @staticmethod
    def forward(ctx, x, tally):
        ctx.tally = tally
        return _my_slice_last(x)

    @staticmethod
    def backward(ctx, grad):
        return _all_gather_last(grad, ctx.tally), None


def _check_divisible(features: int, world: int, what: str) -> None:
    if features % world:
        raise ValueError(f"{what}={features} is not divisible by the {world} ranks")


class ColumnParallelLinear(nn.Module):
    """This rank's output columns of ``full``; ``gather_output`` joins them (all-gather)."""

    def __init__(
        self, full: nn.Linear, gather_output: bool = True, tally: CommTally | None = None
    ) -> None:
        super().__init__()
        rank, world = _group()
        _check_divisible(full.out_features, world, "out_features")
        self.gather_output, self.tally = gather_output, tally
        # W [out, in]: output feature j is row j, so a column of y is a row of W
        self.weight = nn.Parameter(full.weight.detach().chunk(world, dim=0)[rank].clone())
        self.bias = nn.Parameter(full.bias.detach().chunk(world)[rank].clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = CopyToRanks.apply(x, self.tally)
        y = F.linear(x, self.weight, self.bias)  # [B, out/p]
        return GatherColumns.apply(y, self.tally) if self.gather_output else y


class RowParallelLinear(nn.Module):
    """This rank's input rows of ``full``; partial sums are all-reduced, the bias added once."""

    def __init__(
        self, full: nn.Linear, input_is_split: bool = False, tally: CommTally | None = None
    ) -> None:
        super().__init__()
        rank, world = _group()
        _check_divisible(full.in_features, world, "in_features")
        self.input_is_split, self.tally = input_is_split, tally
        self.weight = nn.Parameter(full.weight.detach().chunk(world, dim=1)[rank].clone())
        self.bias = nn.Parameter(full.bias.detach().clone())  # replicated, added after the sum

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.input_is_split:
            x = ScatterColumns.apply(x, self.tally)  # [B, in/p]
        partial = F.linear(x, self.weight)  # [B, out]: this rank's share of the sum
        return ReduceFromRanks.apply(partial, self.tally) + self.bias
