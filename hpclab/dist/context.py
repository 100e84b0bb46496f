"""The rank handle: what a worker function receives (chapter 00; used in chapters 05 and 06).

A worker is ``def worker(ctx: RankContext, *args) -> picklable``. ``ctx`` says who this rank
is (rank, world size, device, backend, threads), lets it report progress to the parent, and
offers helpers that also work with a single process and no process group, so the same training
step runs serially and in parallel. It is immutable: what a rank is does not change mid-run.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RankContext:
    rank: int
    world_size: int
    backend: str  # "gloo", "nccl" or "none" (one process, no process group)
    device: str  # "cpu" or "cuda:N"
    threads: int  # intra-op threads for this rank (usable cores // ranks)
    # Where progress goes: (kind, payload) -> None; the launcher sets it in the rank.
    send: Callable[[str, Any], None] | None = field(default=None, repr=False, compare=False)
    cpus: tuple[int, ...] = ()  # the cores this rank is pinned to; () = not pinned

    def __getstate__(self) -> dict[str, Any]:
        # The channel home stays in its process: a pickled context (spawn, a result) has none.
        return {**self.__dict__, "send": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """True when a process group is initialised for this run."""
        if self.backend == "none":
            return False
        import torch.distributed as dist

        return dist.is_available() and dist.is_initialized()

    def progress(self, done: float, total: float, note: str = "") -> None:
        """Tell the parent how far this rank is (rank 0's progress drives the bar)."""
        if self.send is not None:
            self.send("progress", (done, total, note))

    def log(self, *parts: Any) -> None:
        """A rank-aware print: goes to the parent's log of this rank, never into the cell."""
        print(f"[rank {self.rank}]", *parts, flush=True)

    def barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist

            dist.barrier()

    def all_reduce_mean(self, tensor: Any) -> Any:
        """Average ``tensor`` over ranks in place (identity with one process)."""
        if self.distributed and self.world_size > 1:
            import torch.distributed as dist

            dist.all_reduce(tensor)
            tensor.div_(self.world_size)
        return tensor


def init_process_group(ctx: RankContext, store_path: str, timeout_s: float) -> None:
    """Join the run's process group through the run's ``FileStore`` (no port, no name lookup)."""
    import torch.distributed as dist

    if ctx.backend == "gloo" and "GLOO_SOCKET_IFNAME" not in os.environ:
        if os.path.exists("/sys/class/net/lo"):
            # One node: loopback. Left alone, gloo binds to whatever the host name resolves to,
            # which costs a name lookup (DNS on many compute nodes) and may be a firewalled NIC.
            os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.FileStore(store_path, ctx.world_size)
    store.set_timeout(timeout)
    prefixed = dist.PrefixStore("hpclab", store)
    kwargs: dict[str, Any] = {}
    if ctx.backend == "nccl":
        import torch

        torch.cuda.set_device(int(ctx.device.split(":")[1]))
        kwargs["device_id"] = torch.device(ctx.device)
    dist.init_process_group(
        backend=ctx.backend,
        store=prefixed,
        rank=ctx.rank,
        world_size=ctx.world_size,
        timeout=timeout,
        **kwargs,
    )


def destroy_process_group() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def leave_together(ctx: RankContext) -> None:
    """A barrier before the process group is torn down, after a worker that returned: a rank
    whose worker needs no collective (or ends with a send) may otherwise close its sockets while
    a peer is still connecting or receiving, and that peer fails ("Gloo connectFullMesh failed
    with Connection closed by peer", seen under load). After a failure there is no barrier: the
    failing rank's peers learn of it from their own collectives."""
    import torch.distributed as dist

    if ctx.backend != "none" and ctx.world_size > 1 and dist.is_initialized():
        dist.barrier()
