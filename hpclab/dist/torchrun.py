"""The rank handle under ``torchrun`` (chapter 07: the same worker across nodes).

The chapter 00 launcher starts ranks on one machine and hands each a :class:`RankContext`.
Across nodes the course uses the field's engine instead: Slurm starts one ``torchrun`` per node,
the ``torchrun`` launchers meet (c10d rendezvous on the first node) and start the ranks with
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT`` in their environment. :func:`torchrun_context` reads them, joins the process
group, and yields the same :class:`RankContext`, so a worker written for the launcher runs
unchanged under ``torchrun``.

How the ranks meet: with ``HPCLAB_PG_STORE`` set (the local cluster, whose "nodes" are all this
shared machine) through a ``FileStore`` at that path in the job's private directory, like the
chapter 00 launcher: nothing listens on a port. Otherwise through ``env://``: rank 0 runs a TCP
store at ``MASTER_ADDR:MASTER_PORT`` that listens on every interface of its node, unauthenticated,
for the job's lifetime; on a real cluster that is the internal network between compute nodes
(see :mod:`hpclab.cluster.multinode` for what an administrator should know).
"""

from __future__ import annotations

import contextlib
import datetime
import os
import re
import signal
from collections.abc import Iterator

from hpclab.dist.context import (
    RankContext,
    destroy_process_group,
    init_process_group,
    leave_together,
)
from hpclab.dist.failures import Failure
from hpclab.dist.placement import gpu_count, place, torch_threads


def context_from_env(timeout_s: float = 120.0) -> RankContext:
    """This rank's context from torchrun's environment (not yet in a process group)."""
    try:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except KeyError as exc:
        raise RuntimeError(f"{exc.args[0]} is not set: run this under torchrun") from None
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    # The one placement rule, for this node's ranks: a GPU each (NCCL) or CPU ranks on gloo.
    backend = "nccl" if gpu_count() >= local_world else "gloo"
    where = place(local_world, "auto", backend)
    return RankContext(rank, world, where.backend, where.devices[local_rank], where.threads)


@contextlib.contextmanager
def torchrun_context(timeout_s: float = 120.0) -> Iterator[RankContext]:
    """Join torchrun's process group for the block; always leave it (all ranks together)."""
    import torch.distributed as dist

    ctx = context_from_env(timeout_s)
    # As the chapter 00 launcher's ranks: die with the parent (torchrun's agent, which starts
    # its workers from its main thread, in sessions of their own). A worker whose agent was
    # killed first is otherwise reparented out of the job's process tree and outlives the job
    # (seen: a rank still running after its 2 x 2 job was cancelled).
    from hpclab.dist.child import rank_process_setup

    rank_process_setup(ctx.rank)
    store = os.environ.get("HPCLAB_PG_STORE")
    if store:
        init_process_group(ctx, store, timeout_s)
    else:
        kwargs = {}
        if ctx.backend == "nccl":
            import torch

            torch.cuda.set_device(int(ctx.device.split(":")[1]))
            kwargs["device_id"] = torch.device(ctx.device)
        dist.init_process_group(
            backend=ctx.backend, timeout=datetime.timedelta(seconds=timeout_s), **kwargs
        )
    try:
        with torch_threads(ctx.threads):
            yield ctx
        leave_together(ctx)  # a rank tearing down gloo while a peer still talks can abort
    finally:
        destroy_process_group()


# One entry of torchrun's failure summary ("Failures:" / "Root Cause (first observed failure):"):
#   time      : 2026-11-26_07:54:42
#   host      : node2
#   rank      : 3 (local_rank: 1)
#   exitcode  : -9 (pid: 11304)  (SIGKILL)
_ENTRY = re.compile(
    r"time\s*:\s*(?P<time>\S+)\s*\n\s*host\s*:\s*(?P<host>\S+)\s*\n\s*rank\s*:\s*(?P<rank>\d+)"
    r"[^\n]*\n\s*exitcode\s*:\s*(?P<code>-?\d+)[^\n]*\n(?:\s*error_file[^\n]*\n)?"
    r"\s*traceback\s*:\s*(?P<tb>[^\n]*)"
)


def torchrun_failures(log: str) -> list[Failure]:
    """Every rank failure that the ``torchrun`` launchers (one per node, all writing to the same
    job log) reported. A rank killed by a signal other than SIGTERM failed on its own; one that
    its launcher stopped (SIGTERM) or that exited with an error after a peer went away is a
    consequence (``peer_loss``): :func:`hpclab.dist.failures.diagnose` then names the rank that
    died first, not the one whose launcher happened to report last."""
    out = []
    for k, m in enumerate(_ENTRY.finditer(log)):
        try:
            at = datetime.datetime.strptime(m["time"], "%Y-%m-%d_%H:%M:%S").timestamp()
        except ValueError:
            at = 0.0
        code = int(m["code"])
        own = code < 0 and code != -signal.SIGTERM
        out.append(Failure(int(m["rank"]), at + k * 1e-6, summary=f"on {m['host']}: {m['tb']}",
                           exitcode=code, peer_loss=not own))  # fmt: skip
    return out
