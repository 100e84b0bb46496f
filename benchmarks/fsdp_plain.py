"""A plain FSDP2 training script for torchrun: the baseline of benchmarks/sharding.py.

Written the way PyTorch's FSDP2 examples do it (env:// rendezvous, ``fully_shard`` per layer and
at the root, DistributedSampler, a hand-timed loop), with the same model, data, batch, Adam and
steps as hpclab's ``fsdp --strategy zero3`` run.

Usage: torchrun --standalone --nproc-per-node 2 benchmarks/fsdp_plain.py WIDTH DEPTH BATCH STEPS WARMUP
Rank 0 prints one JSON line: {"step_s": median seconds per step, "steps": ...}.
"""

import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from hpclab.train import make_model, synthetic_images


def main() -> None:
    width, depth, batch, steps, warmup = map(int, sys.argv[1:6])
    world = int(os.environ["WORLD_SIZE"])
    rank = int(os.environ["RANK"])
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // world))
    dist.init_process_group("gloo")
    x, y = synthetic_images(max(4096, 2 * batch * world), (1, 28, 28), seed=0)
    data = TensorDataset(x.reshape(len(x), -1), y)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, seed=0)
    loader = DataLoader(data, batch_size=batch, sampler=sampler, drop_last=True)
    model = make_model("deep", 784, seed=0, depth=depth, width=width)
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    times, epoch = [], 0
    while len(times) < warmup + steps:
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            if len(times) == warmup + steps:
                break
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            float(loss)
            times.append(time.perf_counter() - t0)
        epoch += 1
    if rank == 0:
        print(json.dumps({"step_s": statistics.median(times[warmup:]), "steps": steps}))
    dist.barrier()  # leave together (gloo can abort when a peer tears down mid-talk)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
