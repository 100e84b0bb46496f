"""Train a spec on N ranks: the one entry point, :func:`run_spec` (chapters 06 to 08).

It owns what every caller used to write out: check that the spec can feed the ranks, warm the
parent up once (:func:`preload`, so ranks start with DDP's lazy imports done), and launch the
worker through a *launch strategy*. Placement (devices, threads, pinned cores) is the
launcher's (:func:`hpclab.dist.placement.place`): ``device``, ``threads`` and ``cpus`` go to it.

- ``worker``: what each rank runs, called as ``worker(ctx, spec, *args)``: DDP's
  (:func:`hpclab.train.worker.ddp_worker`, the default), the hand-written data parallelism's,
  the bucket sweep's or the memory probe's (whose "spec" is its own config).
- ``cpus`` and ``deadline``: the autotuner's screening pins each candidate to its cores and
  bounds its run (``deadline`` seconds, from this side; ``None``: no bound).
- ``launch``: :func:`local` (processes on this node through :func:`hpclab.dist.launch`, fork or
  forkserver as :func:`hpclab.dist.start_method` decides), or any callable with its signature:
  chapter 07's multi-node runs pass one that submits ``srun`` + torchrun
  (:class:`hpclab.cluster.multinode.Torchrun`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from hpclab.progress import Progress
from hpclab.train.spec import TrainSpec
from hpclab.train.worker import ddp_worker

DEADLINE_S = 600.0  # a run that has not finished in 10 minutes is stopped, not waited for


@functools.cache
def preload() -> None:
    """Import DDP's lazy dependencies once in the parent, so forked ranks start warm.

    The first ``DistributedDataParallel(...)`` (or Adam step) in a fresh process imports
    ``torch._dynamo`` (~1-3 s, DESIGN.md's measured facts); forked ranks inherit the parent's
    imports (the forkserver preloads them itself: :data:`hpclab.dist.start.FORKSERVER_PRELOAD`).
    """
    import torch._dynamo  # noqa: F401
    import torch.nn.parallel  # noqa: F401


class Launch(Protocol):
    """A launch strategy: run ``worker(ctx, *args)`` on ``ranks`` ranks, results by rank."""

    def __call__(
        self,
        worker: Callable[..., Any],
        ranks: int,
        *,
        args: tuple,
        device: str,
        threads: int | None,
        cpus: Sequence[int] | None,
        progress: Progress | None,
        deadline: float | None,
        timeout_s: float,
    ) -> list[Any]: ...


def local(
    worker: Callable[..., Any],
    ranks: int,
    *,
    args: tuple = (),
    device: str = "auto",
    threads: int | None = None,
    cpus: Sequence[int] | None = None,
    progress: Progress | None = None,
    deadline: float | None = DEADLINE_S,
    timeout_s: float = 30.0,
) -> list[Any]:
    """Ranks as processes on this node (:func:`hpclab.dist.launch`), after :func:`preload`."""
    from hpclab.dist import launch

    preload()
    return launch(
        worker,
        ranks,
        args=args,
        device=device,
        threads_per_rank=threads,
        cpus=cpus,
        progress=progress,
        deadline_s=deadline,
        timeout_s=timeout_s,
    )


def run_spec(
    spec: TrainSpec | Any,
    ranks: int,
    *,
    worker: Callable[..., Any] = ddp_worker,
    args: tuple = (),
    device: str = "auto",
    threads: int | None = None,
    cpus: Sequence[int] | None = None,
    deadline: float | None = DEADLINE_S,
    launch: Launch = local,
    progress: Progress | None = None,
    timeout_s: float = 30.0,
) -> list[Any]:
    """Train ``spec`` on ``ranks`` ranks: ``worker(ctx, spec, *args)`` on each; results by rank.

    A :class:`TrainSpec` is checked against the world first (every rank must get a whole batch
    per epoch). ``timeout_s`` is the process group's (a collective waiting on a lost peer fails
    after it); ``deadline`` bounds the whole run. Raises what the launch raises
    (:class:`hpclab.dist.RankError`, :class:`hpclab.dist.LaunchError`, ``Cancelled``).
    """
    if isinstance(spec, TrainSpec):
        spec.check_ranks(ranks)
    return launch(
        worker,
        ranks,
        args=(spec, *args),
        device=device,
        threads=threads,
        cpus=cpus,
        progress=progress,
        deadline=deadline,
        timeout_s=timeout_s,
    )
