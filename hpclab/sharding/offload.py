"""FSDP2's CPU offload on GPU ranks: what it saves and what it costs (chapter 09 part 2, §5).

``fully_shard(..., offload_policy=CPUOffloadPolicy())`` keeps the sharded parameters, their
gradients and so the optimizer state in host memory (pinned), copies each layer's shard to the
GPU for its all-gather, copies each reduce-scattered gradient shard back, and runs the optimizer
step on the CPU. Between steps the GPU then holds none of the training state: for fp32 Adam,
16 bytes a parameter / N fewer (:func:`hpclab.sharding.planner.state_bytes`), paid for with two
PCIe copies of the shards a step and a CPU optimizer step. On CPU ranks there is nothing to move,
so this runs only where each rank owns a GPU (``tests/gpu/test_sharding_gpu.py``).

:func:`offload_worker` builds ZeRO-3 twice on the same rank (without, then with the policy) and
reports for each the GPU bytes held between steps (the caching allocator's requested bytes after
a step, less those before building: :func:`hpclab.memory.probe.cuda_bytes`), the peak within a
step and the median step time (CUDA events, :func:`time_fn`). It needs a process group even on
one GPU (``fully_shard`` shards over one): launch it with ``backend="nccl"``.
"""

from __future__ import annotations

import gc
from typing import Any

import torch
import torch.distributed as dist

from hpclab.dist import RankContext
from hpclab.measure.timing import time_fn
from hpclab.memory.probe import cuda_bytes
from hpclab.sharding.wrappers import build
from hpclab.train import batches, dataset, make_model
from hpclab.train.step import train_step


def _warm_cuda(device: str) -> None:
    """cuBLAS's workspace comes from the caching allocator at the first matmul: allocate it
    before the first baseline, so it counts in neither run's bytes."""
    a = torch.ones(64, 64, device=device, requires_grad=True)
    (a @ a).sum().backward()
    torch.cuda.synchronize(device)


def offload_worker(ctx: RankContext, spec: Any, depth: int, width: int) -> list[dict[str, Any]]:
    """ZeRO-3 without and with ``CPUOffloadPolicy`` on this GPU rank (``spec``: Adam, the
    ``deep`` MLP of ``depth`` x ``width``; ``spec.steps`` timed steps after ``spec.warmup``)."""
    if not ctx.device.startswith("cuda"):
        raise ValueError(f"CPU offload moves GPU state to the host; device={ctx.device} has none")
    if not dist.is_initialized():
        raise ValueError("offload_worker needs a process group (fully_shard shards over its ranks): "
                         "launch it with backend='nccl', also on one GPU")  # fmt: skip
    _warm_cuda(ctx.device)
    out = []
    for offload in (False, True):
        gc.collect()  # the first run's modules and hooks hold cycles: free them before the baseline
        torch.cuda.synchronize(ctx.device)
        before = cuda_bytes(ctx.device)
        model = make_model("deep", spec.side**2, seed=spec.seed, depth=depth, width=width)
        net, opt = build("zero3", model.to(ctx.device), spec.optimizer, spec.lr, offload=offload)
        stream = batches(ctx, spec, dataset(spec))

        def step(net=net, opt=opt, stream=stream) -> None:
            train_step(net, opt, *next(stream))

        for _ in range(spec.warmup):
            step()
        torch.cuda.synchronize(ctx.device)
        held = cuda_bytes(ctx.device) - before
        torch.cuda.reset_peak_memory_stats(ctx.device)
        step()
        torch.cuda.synchronize(ctx.device)
        peak = cuda_bytes(ctx.device, peak=True) - before
        timing = time_fn(step, device=ctx.device, warmup=0, repeat=spec.steps, max_time_s=60.0)
        out.append({"offload": offload, "held_bytes": held, "peak_bytes": peak,
                    "step_s": timing.median_s, "params": sum(p.numel() for p in net.parameters())})  # fmt: skip
        del net, opt, model, stream, step
    return out
