"""Building a model no rank holds whole: FSDP2 on the meta device (chapter 09 part 2, §5).

``with torch.device("meta")`` builds the module's structure with shapes but no memory;
``fully_shard`` turns each parameter into a dim-0 sharded DTensor (still on meta);
``to_empty(device=...)`` gives each rank memory for its own shards only; then the values are
written. PyTorch's recipe (its ``fully_shard`` docs and torchtitan) runs the model's
initialisers again on the sharded DTensors, and DTensor's offset-based random generator gives
each shard its own part of one random stream, but only on CUDA-like devices: on a CPU mesh
DTensor's random ops fall back to each rank's own generator (torch warns "DTensor random
operators may not have complete support on cpu device mesh"), so every rank would draw the same
numbers for different rows.

:func:`fill_shards` instead replays :func:`hpclab.train.make_model`'s random stream:
``nn.Linear`` draws its weight, then its bias (``kaiming_uniform_(a=sqrt(5))``, then
``uniform_(-1/sqrt(fan_in), 1/sqrt(fan_in))``), number after number from the seeded
generator. A rank draws the other ranks' rows a few at a time into a small scratch block and its
own rows into its shard, so its weights equal the whole model's bit for bit, and the most it
holds while building is its shards and 4 KiB (:func:`build_model` measures it with
:class:`~hpclab.sharding.probe.StepProbe`). One exception, torch's: where a layer's rows do not
divide by N, the rank with the shorter shard holds its shards twice for a moment inside
``to_empty`` (FSDP2's ``_apply`` re-pads each of them: measured here, 3 ranks of width 64, 1.7x
its shards on that rank, against 1.05x on the others).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from hpclab.dist import RankContext
from hpclab.parallel.tensor_parallel import CommTally
from hpclab.sharding.probe import StepProbe, local
from hpclab.sharding.wrappers import build
from hpclab.train import make_model

INITS = ("full", "meta")
SHARDED = ("zero2", "zero3", "zero3-bf16", "hsdp")  # FSDP2: the strategies meta init applies to
SCRATCH_NUMEL = 1 << 10  # numbers drawn at a time for other ranks' rows (4 KiB in fp32)


def _rows(param: torch.Tensor) -> tuple[int, int]:
    """(number of dim-0 shards, this rank's shard) of an FSDP2 parameter; (1, 0) if whole."""
    from torch.distributed.tensor import Shard

    for dim, place in enumerate(getattr(param, "placements", ())):
        if isinstance(place, Shard):
            if place.dim != 0:
                raise ValueError(f"a parameter sharded on dim {place.dim}; FSDP2 shards dim 0")
            mesh = param.device_mesh
            return mesh.size(dim), mesh.get_local_rank(dim)
    return 1, 0


def _replay(param: torch.Tensor, draw: Callable[[torch.Tensor], Any]) -> None:
    """Draw ``param``'s rows block by block (torch.chunk's blocks, FSDP2's shards) in order;
    this rank's rows land in its shard, the others' in a small scratch block."""
    mine = local(param)
    shards, me = _rows(param)
    rows = param.shape[0]
    per = -(-rows // shards)
    row = math.prod(param.shape[1:])
    step = max(1, min(per, SCRATCH_NUMEL // row))  # others' rows, a few at a time
    scratch = torch.empty((step, *param.shape[1:]), dtype=mine.dtype, device=mine.device)
    for r in range(shards):
        lo, hi = r * per, min(rows, (r + 1) * per)
        if hi <= lo:  # more ranks than rows: the last shards are empty
            break
        if r != me:
            for a in range(lo, hi, step):
                draw(scratch[: min(step, hi - a)])
        elif mine.shape[0] == hi - lo:
            draw(mine)
        else:
            raise RuntimeError(f"shard {me} has {mine.shape[0]} rows; torch.chunk gives {hi - lo}")


@torch.no_grad()
def fill_shards(model: nn.Module, seed: int) -> None:
    """Write into every rank's shards the values ``make_model(..., seed=seed)`` gives the whole
    model (``nn.Linear`` layers only; PyTorch's ``Linear.reset_parameters``)."""
    gen = torch.Generator().manual_seed(seed)  # the stream torch.manual_seed(seed) starts
    for m in model.modules():
        if isinstance(m, nn.Linear):
            _replay(m.weight, lambda t: nn.init.kaiming_uniform_(t, a=math.sqrt(5), generator=gen))
            if m.bias is not None:
                bound = 1 / math.sqrt(m.in_features) if m.in_features > 0 else 0
                _replay(m.bias, lambda t, b=bound: nn.init.uniform_(t, -b, b, generator=gen))
        elif any(True for _ in m.parameters(recurse=False)):
            raise ValueError(f"fill_shards knows nn.Linear only, not {type(m).__name__}")


def build_model(
    strategy: str, init: str, ctx: RankContext, spec: Any, *, features: int, depth: int,
    width: int, nodes: int = 1,
) -> tuple[nn.Module, Any, int]:  # fmt: skip
    """``(net, optimizer, build_peak_bytes)``: chapter 06's ``deep`` MLP wrapped by
    ``strategy``, built whole and then sharded (``init="full"``) or from the meta device
    (``init="meta"``: the FSDP2 strategies only; the others replicate the whole model anyway),
    with the most bytes this rank held at once while building."""
    if init not in INITS:
        raise ValueError(f"init={init!r} is not known; allowed: {', '.join(INITS)}")
    shape = {"seed": spec.seed, "depth": depth, "width": width}
    wrap = {"distributed": ctx.distributed, "nodes": nodes, "device": ctx.device}
    with StepProbe(CommTally()) as probe:
        if init == "meta" and strategy in SHARDED:
            with torch.device("meta"):
                model = make_model("deep", features, **shape)
            net, opt = build(strategy, model, spec.optimizer, spec.lr, **wrap)
            net.to_empty(device=ctx.device)
            fill_shards(net, spec.seed)
        else:
            model = make_model("deep", features, **shape).to(ctx.device)
            net, opt = build(strategy, model, spec.optimizer, spec.lr, **wrap)
    return net, opt, probe.peak
