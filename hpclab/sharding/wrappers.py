"""The data-parallel strategies of chapter 09 part 2, each built the same way from one model.

``build(strategy, model, optimizer_name, lr, nodes=1)`` returns ``(net, optimizer)`` that
:func:`hpclab.train.train_step` trains unchanged:

============  ======================================================================
ddp           ``DistributedDataParallel``: everything replicated, gradients all-reduced
zero1         :class:`hpclab.sharding.zero1.Zero1Optimizer` (by hand): optimizer state sharded,
              gradients reduce-scattered, parameters all-gathered
zero1-torch   DDP + ``torch.distributed.optim.ZeroRedundancyOptimizer``: optimizer state
              sharded, but DDP's all-reduce of the whole gradient, then broadcasts
zero2         FSDP2 ``fully_shard(reshard_after_forward=False)``: parameters stay gathered from
              forward to backward (one all-gather per step), gradients reduce-scattered
zero3         FSDP2 ``fully_shard(reshard_after_forward=True)``: parameters gathered again in
              backward (two all-gathers per step, Rajbhandari et al. 2020's 1.5x DDP's volume)
zero3-bf16    zero3 with FSDP2's ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``:
              the all-gathers and the compute in bf16, gradients reduced in fp32, the sharded
              parameters and Adam in fp32 (so no separate master copy)
hsdp          FSDP2 ``fully_shard(mesh=...)`` on a 2-D ``DeviceMesh`` ``(nodes, ranks / nodes)``
              named ``("replicate", "shard")``: ZeRO-3 inside each node, each shard's gradient
              all-reduced across the nodes (PyTorch's HSDP; Zhao et al. 2023's hybrid sharding)
============  ======================================================================

FSDP2 is applied bottom-up, one unit per ``nn.Linear`` and one at the root (PyTorch's
``fully_shard`` docs). Between steps FSDP2 holds only shards in both modes (it reshards after
backward); ``zero2`` differs from ``zero3`` inside the step, which the peak shows.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from hpclab.sharding.zero1 import Zero1Optimizer
from hpclab.train.optim import make_optimizer

STRATEGIES = ("ddp", "zero1", "zero1-torch", "zero2", "zero3", "zero3-bf16", "hsdp")
DEFAULT_STRATEGIES = ("ddp", "zero1", "zero2", "zero3")
STAGE = {"ddp": 0, "zero1": 1, "zero1-torch": 1, "zero2": 2, "zero3": 3, "zero3-bf16": 3,
         "hsdp": 3}  # fmt: skip


def check_strategy(strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise ValueError(
            f"strategy={strategy!r} does not exist; allowed: {', '.join(STRATEGIES)} "
            "(ZeRO has stages 1 to 3; ddp is stage 0)"
        )


def hsdp_mesh(device: torch.device, nodes: int):
    """The 2-D mesh of HSDP: ``nodes`` replicas of ``world / nodes`` shards, rank r on node
    r // (world / nodes), as torchrun numbers ranks node by node (PyTorch's ``fully_shard``
    docs: a 2-D mesh means HSDP, replicate on dim 0, shard on dim 1)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    from hpclab.sharding.comm_model import check_nodes

    per_node = check_nodes(dist.get_world_size(), nodes)
    return init_device_mesh(device.type, (nodes, per_node), mesh_dim_names=("replicate", "shard"))


def flat_mesh(device: torch.device) -> Any:
    """A 1-D ``DeviceMesh`` of all ranks on ``device``'s type (ZeRO-2/3 shard over every rank)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device.type, (dist.get_world_size(),))


def build(
    strategy: str,
    model: nn.Module,
    optimizer: str,
    lr: float,
    distributed: bool = True,
    nodes: int = 1,
    device: str | torch.device | None = None,
    offload: bool = False,
) -> tuple[nn.Module, Any]:
    """``model`` wrapped by ``strategy`` and its optimizer (``distributed=False``: no process
    group, the bare model and optimizer: the serial reference). ``nodes``: HSDP's replicas.
    ``device``: where the ranks compute (default: the model's; give it for a model still on the
    meta device). ``offload``: FSDP2's ``CPUOffloadPolicy`` (shards, gradients and the optimizer
    step in host memory; GPU ranks only)."""
    check_strategy(strategy)
    if offload and not strategy.startswith(("zero2", "zero3", "hsdp")):
        raise ValueError(f"offload is FSDP2's (zero2, zero3, zero3-bf16, hsdp), not {strategy}'s")
    if not distributed:
        return model, make_optimizer(optimizer, model.parameters(), lr)
    if strategy.startswith(("zero2", "zero3", "hsdp")):
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

        policy = MixedPrecisionPolicy()  # the default: everything in the parameters' fp32
        if strategy == "zero3-bf16":
            policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        kw = {"reshard_after_forward": strategy != "zero2", "mp_policy": policy}
        if offload:
            kw["offload_policy"] = CPUOffloadPolicy()
        # Always a mesh of the ranks' own device type: without one, fully_shard makes a CUDA
        # mesh wherever a GPU is visible and moves CPU ranks' layers onto cuda:0 (an H100 run)
        where = torch.device(device) if device else next(model.parameters()).device
        kw["mesh"] = hsdp_mesh(where, nodes) if strategy == "hsdp" else flat_mesh(where)
        for layer in model.modules():
            if isinstance(layer, nn.Linear):
                fully_shard(layer, **kw)
        fully_shard(model, **kw)
        return model, make_optimizer(optimizer, model.parameters(), lr)
    if strategy == "zero1":
        return model, Zero1Optimizer(
            model.parameters(), lambda ps: make_optimizer(optimizer, ps, lr)
        )
    from torch.nn.parallel import DistributedDataParallel as DDP

    net = DDP(model)
    if strategy == "ddp":
        return net, make_optimizer(optimizer, net.parameters(), lr)
    from torch.distributed.optim import ZeroRedundancyOptimizer

    cls = type(make_optimizer(optimizer, [nn.Parameter(torch.zeros(1))], lr))
    return net, ZeroRedundancyOptimizer(net.parameters(), optimizer_class=cls, lr=lr)


def full_params(net: nn.Module) -> torch.Tensor:
    """Every parameter, whole, as one flat vector (a collective under FSDP2: call it on every
    rank)."""
    module = getattr(net, "module", net)
    parts = []
    for p in module.parameters():
        whole = p.full_tensor() if hasattr(p, "full_tensor") else p
        parts.append(whole.detach().reshape(-1).cpu())
    return torch.cat(parts)
