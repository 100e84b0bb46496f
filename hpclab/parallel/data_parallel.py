"""Data parallel written by hand: naive and bucketed, beside torch's DDP (chapter 06, part 2).

Both wrappers keep a full replica of the model on every rank and average the gradients over
ranks inside ``backward()``, so :func:`hpclab.train.train_step` trains them unchanged, exactly as
it trains a ``DistributedDataParallel`` model.

- :class:`NaiveDataParallel` waits until backward has produced *every* gradient, then
  all-reduces them one tensor at a time, blocking: all communication comes after all compute,
  and every small tensor pays the all-reduce latency.
- :class:`BucketedDataParallel` packs gradients, in the order backward produces them (last
  layer first), into flat buckets of about ``bucket_cap_mb``. As soon as a bucket is full its
  all-reduce starts asynchronously (``async_op=True`` returns a work handle) while backward goes
  on computing earlier layers' gradients; the handles are waited on when the last bucket has
  started. That overlap, and fewer, bigger messages, is what DDP's C++ reducer does too.

Both broadcast rank 0's weights at construction (so replicas start equal, as DDP does) and work
with one process and no process group (then they do nothing).
"""

from __future__ import annotations

import time

import torch
from torch import nn

DDP_FIRST_BUCKET_MB = 1.0  # DDP's small first bucket: the last layers' gradients start early


def _dist():
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def _broadcast_from_rank0(module: nn.Module) -> None:
    dist = _dist()
    if dist is not None:
        for t in [*module.parameters(), *module.buffers()]:
            dist.broadcast(t.data, src=0)


class NaiveDataParallel(nn.Module):
    """After backward: one blocking all-reduce per gradient tensor, then divide by ranks."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.world = _dist().get_world_size() if _dist() else 1
        self.ready = 0
        self.blocked_s = 0.0  # time spent blocked in communication, summed over steps
        _broadcast_from_rank0(module)
        for p in self.params:
            p.register_post_accumulate_grad_hook(self._on_grad)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _on_grad(self, _param: torch.Tensor) -> None:
        self.ready += 1
        if self.ready < len(self.params):  # backward is not done yet: do nothing
            return
        self.ready = 0
        dist = _dist()
        if dist is None:
            return
        t0 = time.perf_counter()
        for p in self.params:  # the whole backward pass is over: now communicate
            dist.all_reduce(p.grad)
            p.grad.div_(self.world)
        self.blocked_s += time.perf_counter() - t0


class Bucket:
    """Consecutive gradients (in backward order) sharing one flat buffer and one all-reduce."""

    def __init__(self, params: list[nn.Parameter]) -> None:
        self.params = params
        self.buffer = torch.zeros(sum(p.numel() for p in params), device=params[0].device)
        self.offsets = {}
        at = 0
        for p in params:
            self.offsets[p] = at
            at += p.numel()
        self.pending = len(params)
        self.work = None  # the async all-reduce's handle, once started

    def view(self, p: nn.Parameter) -> torch.Tensor:
        start = self.offsets[p]
        return self.buffer[start : start + p.numel()].view_as(p)


def make_buckets(params: list[nn.Parameter], cap_mb: float, first_mb: float) -> list[Bucket]:
    """Split ``params`` (backward order: reversed definition order) into buckets of ~``cap_mb``;
    the first holds ~``first_mb``. A tensor bigger than the cap gets a bucket of its own."""
    buckets, current, size = [], [], 0
    cap = first_mb * 2**20
    for p in reversed(params):
        nbytes = p.numel() * p.element_size()
        if current and size + nbytes > cap:
            buckets.append(Bucket(current))
            current, size, cap = [], 0, cap_mb * 2**20
        current.append(p)
        size += nbytes
    if current:
        buckets.append(Bucket(current))
    return buckets


class BucketedDataParallel(nn.Module):
    """Each bucket's all-reduce starts (async) as soon as backward has filled it."""

    def __init__(
        self, module: nn.Module, bucket_cap_mb: float = 25.0, first_bucket_mb: float = 1.0
    ) -> None:
        super().__init__()
        self.module = module
        params = [p for p in module.parameters() if p.requires_grad]
        self.buckets = make_buckets(params, bucket_cap_mb, min(first_bucket_mb, bucket_cap_mb))
        self.bucket_of = {p: b for b in self.buckets for p in b.params}
        self.world = _dist().get_world_size() if _dist() else 1
        self.started = 0
        self.blocked_s = 0.0  # time spent waiting for all-reduces, summed over steps
        _broadcast_from_rank0(module)
        for p in params:
            p.register_post_accumulate_grad_hook(self._on_grad)

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _on_grad(self, p: nn.Parameter) -> None:
        bucket = self.bucket_of[p]
        bucket.view(p).copy_(p.grad)
        bucket.pending -= 1
        if bucket.pending:
            return
        dist = _dist()
        if dist is not None:  # full: start its all-reduce now, and let backward go on
            bucket.work = dist.all_reduce(bucket.buffer, async_op=True)
        self.started += 1
        if self.started == len(self.buckets):  # the last bucket: backward is over
            self._finish()

    def _finish(self) -> None:
        for bucket in self.buckets:
            if bucket.work is not None:
                t0 = time.perf_counter()
                bucket.work.wait()
                self.blocked_s += time.perf_counter() - t0
                bucket.buffer.div_(self.world)
            for p in bucket.params:  # the averaged gradient, in place of the local one
                p.grad = bucket.view(p)
            bucket.pending, bucket.work = len(bucket.params), None
        self.started = 0
