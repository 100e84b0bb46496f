"""A plain FSDP2 training script for torchrun: the baseline of benchmarks/sharding.py.

Written the way PyTorch's FSDP2 examples do it (env:// rendezvous, ``fully_shard`` per layer and
at the root, DistributedSampler, a hand-timed loop: the data and the loop are the plain DDP
script's, ``benchmarks/ddp_torchrun_plain.py``), with the same model, data, batch, Adam and
steps as hpclab's ``fsdp --strategy zero3`` run.

Usage: torchrun --standalone --nproc-per-node 2 benchmarks/fsdp_plain.py WIDTH DEPTH BATCH STEPS WARMUP
Rank 0 prints one JSON line: {"step_s": median seconds per step, "steps": ...}.
"""

import sys

import torch
from ddp_torchrun_plain import loader_for, report, timed_steps  # beside this file
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from hpclab.train import make_model


def main() -> None:
    width, depth, batch, steps, warmup = map(int, sys.argv[1:6])
    loader, sampler = loader_for(batch)
    model = make_model("deep", 784, seed=0, depth=depth, width=width)
    mesh = init_device_mesh("cpu", (torch.distributed.get_world_size(),))  # CPU ranks, as hpclab's
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    report(timed_steps(model, opt, loader, sampler, steps + warmup)[warmup:], steps)


if __name__ == "__main__":
    main()
