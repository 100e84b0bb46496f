"""A plain DDP training script for torchrun: the baseline of benchmarks/ddp_overhead.py.

Written the way the PyTorch DDP tutorials do it (env:// rendezvous, DistributedSampler, DDP,
a hand-timed loop), with the same model, data, batch and steps as hpclab's ``ddp`` run.

Usage: torchrun --standalone --nproc-per-node 2 benchmarks/ddp_torchrun_plain.py MODEL BATCH STEPS WARMUP
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
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from hpclab.train import make_model, synthetic_images


def main() -> None:
    model_name, batch, steps, warmup = sys.argv[1], *map(int, sys.argv[2:5])
    loader, sampler = loader_for(batch)
    model = DDP(make_model(model_name, 784, seed=0))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    report(timed_steps(model, opt, loader, sampler, steps + warmup)[warmup:], steps)


def loader_for(batch: int):
    """(loader, sampler): this rank's share of the synthetic MNIST-sized data, as hpclab's."""
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // world))
    dist.init_process_group("gloo")
    x, y = synthetic_images(max(4096, 2 * batch * world), (1, 28, 28), seed=0)
    data = TensorDataset(x.reshape(len(x), -1), y)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, seed=0)
    return DataLoader(data, batch_size=batch, sampler=sampler, drop_last=True), sampler


def timed_steps(model, opt, loader, sampler, total: int) -> list[float]:
    """Seconds of each of ``total`` plain steps (forward, loss, backward, update)."""
    times, epoch = [], 0
    while len(times) < total:
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            if len(times) == total:
                break
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            float(loss)
            times.append(time.perf_counter() - t0)
        epoch += 1
    return times


def report(times: list[float], steps: int) -> None:
    if dist.get_rank() == 0:
        print(json.dumps({"step_s": statistics.median(times), "steps": steps}))
    # Leave together: a rank tearing down gloo while its peer still talks can abort (SIGABRT).
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
