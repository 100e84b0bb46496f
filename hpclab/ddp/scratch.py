"""The receive buffer the send/recv all-reduces reuse from call to call (chapter 06).

Every hand-written all-reduce (:mod:`hpclab.ddp.ring`, :mod:`hpclab.ddp.collectives`) receives
a peer's data into a buffer before adding it. A fresh ``torch.empty_like`` per call is not free
for big CPU messages: whether the allocator hands back the block it freed last call or maps new
memory depends on what else was allocated in between (glibc maps blocks of this size straight
from the kernel and may return them on free). New memory costs one page fault per 4 KiB page on
the first write, the ``recv``: 4096 faults and 16 MiB zeroed by the kernel per call at 16 MiB.
Measured here (one process, 2-core VM): a loop of allocate, fill, add and free took 4096 faults
and 8.8 ms a call against 2.7-3.7 ms with a reused buffer; in other patterns (two gloo ranks
alternating algorithms, as benchmarks/collectives.py does) the allocator reused the block and
took none. One buffer per process makes the cost the same every call, whatever ran before.

One buffer per (dtype, device) in each rank's process, grown to the largest message seen; the
collectives of one process group run one after another, so no two calls use it at once. CUDA
tensors get a fresh one each time: PyTorch's caching allocator already reuses GPU blocks.
"""

from __future__ import annotations

import torch

_BUFFERS: dict[tuple[torch.dtype, torch.device], torch.Tensor] = {}


def receive_buffer(like: torch.Tensor, numel: int) -> torch.Tensor:
    """A contiguous 1-D tensor of ``numel`` elements of ``like``'s dtype and device, with
    arbitrary contents, reused by the next call that asks for no more elements."""
    if like.device.type == "cuda":
        return torch.empty(numel, dtype=like.dtype, device=like.device)
    key = (like.dtype, like.device)
    buf = _BUFFERS.get(key)
    if buf is None or buf.numel() < numel:
        buf = _BUFFERS[key] = torch.empty(numel, dtype=like.dtype, device=like.device)
    return buf[:numel]
