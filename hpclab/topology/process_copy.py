"""Moving a tensor between two processes: the CPU analogue of P2P vs staging (chapter 02).

Two ranks on this node (``hpclab.dist.launch``, gloo over loopback) move ``nbytes`` from rank 0
to rank 1 three ways, the same lesson as GPUDirect P2P vs a copy through host memory:

- ``shared memory``: rank 0 copies into a buffer both processes map (``share_memory_()``), rank
  1 copies out of it: memory to memory, no kernel in between;
- ``gloo send/recv``: the bytes go through the loopback TCP stack (copied into the kernel's
  socket buffers and out again);
- ``pickled object``: ``send_object_list`` pickles the tensor first, then sends the pickle's size
  and bytes: one more copy on each side, as a copy staged through a host buffer adds one.

Each way is timed from a barrier before rank 0 starts until rank 1 holds the bytes (the barriers'
own latency, ~0.2 ms on loopback, is included: use sizes of several MiB).
"""

from __future__ import annotations

import time
from typing import Any

import torch

METHODS = ("shared memory", "gloo send/recv", "pickled object")


def _barrier() -> None:
    import torch.distributed as dist

    dist.barrier()


def mover(ctx: Any, nbytes: int, repeat: int, shared: torch.Tensor) -> dict[str, list[float]]:
    """Rank worker: time each method ``repeat`` times; rank 1 checks the bytes it received."""
    import torch.distributed as dist

    src = (torch.arange(nbytes, dtype=torch.int64) % 251).to(torch.uint8)
    dst = torch.zeros(nbytes, dtype=torch.uint8)
    samples: dict[str, list[float]] = {m: [] for m in METHODS}
    for i in range(repeat + 1):  # the first round warms up and is dropped
        for method in METHODS:
            dst.zero_()
            _barrier()
            t0 = time.perf_counter()
            if method == "shared memory":
                if ctx.rank == 0:
                    shared.copy_(src)
                _barrier()
                if ctx.rank == 1:
                    dst.copy_(shared)
            elif method == "gloo send/recv":
                if ctx.rank == 0:
                    dist.send(src, dst=1)
                else:
                    dist.recv(dst, src=0)
            else:
                box = [src if ctx.rank == 0 else None]
                if ctx.rank == 0:
                    dist.send_object_list(box, dst=1)
                else:
                    dist.recv_object_list(box, src=0)
                    dst.copy_(box[0])
            _barrier()
            dt = time.perf_counter() - t0
            if ctx.rank == 1 and not torch.equal(dst[::4099], src[::4099]):
                raise AssertionError(f"{method}: rank 1 did not receive rank 0's bytes")
            if i > 0:
                samples[method].append(dt)
    return samples


def measure(nbytes: int, repeat: int = 5, progress: Any = None) -> list[dict[str, Any]]:
    """Records ``method``, ``bytes``, ``seconds`` (median), ``gbps`` for the three methods."""
    import statistics

    from hpclab.dist import launch

    shared = torch.zeros(nbytes, dtype=torch.uint8).share_memory_()
    results = launch(
        mover,
        2,
        args=(nbytes, repeat, shared),
        backend="gloo",
        device="cpu",
        start_method="fork",
        threads_per_rank=1,
        progress=progress,
    )
    out = []
    for method in METHODS:
        seconds = statistics.median(results[1][method])
        out.append(
            {
                "tier": "live",
                "record": "process",
                "method": method,
                "bytes": nbytes,
                "seconds": seconds,
                "seconds_min": min(results[1][method]),
                "gbps": nbytes / seconds / 1e9,
                "repeats": len(results[1][method]),
            }
        )
    return out
