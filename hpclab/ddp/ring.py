"""Ring all-reduce written out with send/recv, beside ``dist.all_reduce`` (chapter 06).

The algorithm Baidu brought to deep learning (2017) and Horovod used through NCCL (Guan 2019's
"Horovod" slides); NCCL today picks ring, tree, NVLS, CollNet or PAT per call. Ranks sit on a ring; the tensor is cut into n chunks.

1. Reduce-scatter, n-1 steps: at step s rank r sends chunk (r - s) mod n to its right
   neighbour and adds the chunk (r - s - 1) mod n that arrives from its left. After it,
   rank r holds the full sum of chunk (r + 1) mod n.
2. All-gather, n-1 steps: the finished chunks travel once more round the ring, replacing.

Each rank sends 2(n-1) chunks of m/n bytes: 2(n-1)/n x m in total whatever n is, which is why
the ring's time barely grows with n and why nccl-tests' busbw uses that factor. This version is
for reading, not speed: blocking steps, one chunk at a time, no pipelining.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from hpclab.config import Config, param
from hpclab.ddp.scratch import receive_buffer
from hpclab.dist import RankContext
from hpclab.measure.timing import time_fn
from hpclab.progress import Progress
from hpclab.results import Result, make_result


def ring_allreduce(tensor: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Sum ``tensor`` over all ranks in place with point-to-point messages; returns it."""
    import torch.distributed as dist

    n = world_size
    if n == 1:
        return tensor
    flat = tensor.view(-1)  # a view: chunks below write straight into ``tensor``
    chunks = list(flat.tensor_split(n))  # n views, sizes differ by at most one element
    right, left = (rank + 1) % n, (rank - 1) % n
    incoming = receive_buffer(flat, chunks[0].numel())  # reused: no new pages per call
    for s in range(n - 1):  # reduce-scatter
        send_i, recv_i = (rank - s) % n, (rank - s - 1) % n
        box = incoming[: chunks[recv_i].numel()]
        req = dist.isend(chunks[send_i].contiguous(), dst=right)  # isend: no deadlock on a ring
        dist.recv(box, src=left)
        req.wait()
        chunks[recv_i].add_(box)
    for s in range(n - 1):  # all-gather: a finished chunk replaces ours, so receive in place
        send_i, recv_i = (rank + 1 - s) % n, (rank - s) % n
        req = dist.isend(chunks[send_i].contiguous(), dst=right)
        dist.recv(chunks[recv_i], src=left)  # a contiguous view of ``flat``: no copy after
        req.wait()
    return tensor


@dataclass(frozen=True)
class RingConfig(Config):
    ranks: int = param(2, min=2, max=64, help="ranks on the ring")
    sizes: tuple = param(
        (4096, 2**20, 16 * 2**20),
        quick=(4096, 2**20, 4 * 2**20),
        help="message sizes in bytes (multiples of 4)",
        min=4,
        max=2**31,
    )
    repeat: int = param(5, min=3, max=1000, quick=3, help="timed samples per size")


def compare_worker(
    ctx: RankContext, sizes: tuple[int, ...], repeat: int, impl: Any = None
) -> list[dict]:
    """Check ``impl`` (default: :func:`ring_allreduce`) against ``dist.all_reduce``, then time
    both, interleaved size by size."""
    import torch.distributed as dist

    impl = impl or ring_allreduce
    gen = torch.Generator().manual_seed(1234 + ctx.rank)
    out = []
    for nbytes in sizes:
        x = torch.randn(nbytes // 4, generator=gen).to(ctx.device)
        ref, mine = x.clone(), x.clone()
        dist.all_reduce(ref)
        impl(mine, ctx.rank, ctx.world_size)
        err = float((mine - ref).abs().max()) if x.numel() else 0.0
        row = {"bytes": nbytes, "max_abs_err": err}
        for name, fn in (
            ("naive ring", lambda x=x: impl(x, ctx.rank, ctx.world_size)),
            ("dist.all_reduce", lambda x=x: dist.all_reduce(x)),
        ):
            x.zero_()  # zeros stay zeros: timing does not overflow
            t = time_fn(fn, device=ctx.device, warmup=1, repeat=repeat, max_time_s=float("inf"))
            row[name] = t.median_s
        out.append(row)
    return out


def run_ring(config: RingConfig, progress: Progress) -> Result:
    from hpclab.ddp.allreduce import busbw_gbps
    from hpclab.train import local  # launch on this node, warmed up (preload) first

    bad = [s for s in config.sizes if s % 4]
    if bad:
        from hpclab.config import ConfigError

        raise ConfigError(f"sizes={bad[0]} is not a multiple of 4 bytes; allowed: fp32 messages")
    progress.update(0, 1, f"{config.ranks} ranks")
    outs = local(
        compare_worker,
        config.ranks,
        args=(tuple(config.sizes), config.repeat),
        device="cpu",
        progress=progress,
    )
    records = []
    for j, nbytes in enumerate(config.sizes):
        err = max(o[j]["max_abs_err"] for o in outs)
        for impl in ("naive ring", "dist.all_reduce"):
            t = max(o[j][impl] for o in outs)
            records.append(
                {
                    "tier": "live",
                    "impl": impl,
                    "ranks": config.ranks,
                    "bytes": nbytes,
                    "time_s": t,
                    "busbw_gbps": busbw_gbps(nbytes, t, config.ranks),
                    "max_abs_err": err,
                }
            )
    for r in records:
        if r["impl"] == "naive ring":
            other = next(
                o for o in records if o["impl"] == "dist.all_reduce" and o["bytes"] == r["bytes"]
            )
            r["slowdown"] = r["time_s"] / other["time_s"]
    progress.update(1, 1, "done")
    return make_result("ring-allreduce", config, records)
