"""Chapter 05, Hogwild!: lock-free SGD by several processes on one shared-memory model.

The model's parameters live in shared memory (``model.share_memory()``); ``workers``
processes (forked where no GPU is visible, else started by forkserver:
:func:`hpclab.dist.start_method`) each run plain SGD on their own minibatches and write into the same tensors with no
lock (Niu, Recht, Re, Wright, "Hogwild!", NIPS 2011; Nakayama 2017 shows PyTorch's version). The
naive alternative, ``locking="locked"``, takes one process lock around every update, with the
same interface. Serial SGD (one process, the same total number of updates) is the baseline.

Timing excludes the fork and a warm-up: every worker warms up on a private copy, then all wait
at a barrier, and the wall time runs from the barrier to the last worker's last update
(``time.monotonic`` is one clock for all processes on Linux).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from hpclab.dist import RankContext, launch, start_method
from hpclab.progress import Progress
from hpclab.sgd.problems import Problem, Sampler
from hpclab.train import train_step

# Chosen by hand on these problems (serial SGD, batch 32, 1000 steps): stable, with a clear
# loss drop within the default run.
DEFAULT_LR = {"dense": 0.1, "large": 0.05, "sparse": 1.0}


def sgd_step(
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    problem: Problem,
    idx: torch.Tensor,
    lock: Any = None,
) -> float:
    """:func:`hpclab.train.train_step` on samples ``idx`` of the problem: the write into the
    (shared) weights is under ``lock`` when one is given (the naive, locked variant), else
    lock-free (Hogwild)."""
    x, y = problem.x_train[idx], problem.y_train[idx]
    return train_step(model, opt, x, y, problem.loss_fn, lock=lock)


def hogwild_worker(
    ctx: RankContext,
    problem: Problem,
    model: torch.nn.Module,
    steps: int,
    batch: int,
    lr: float,
    seed: int,
    barrier: Any,
    lock: Any = None,
    log_every: int = 10,
) -> dict[str, Any]:
    """Run ``steps`` SGD updates on the shared ``model``; returns timing and a loss curve.

    ``model``'s parameters must be in shared memory (``model.share_memory()`` before the fork),
    or the updates stay in this process. Gradients are per process (allocated after the fork).
    """
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    sampler = Sampler(problem.n_train, batch, seed, ctx.rank)
    # Warm-up on a private model: the first steps pay for allocator and autograd set-up.
    warm = problem.model()
    warm_opt = torch.optim.SGD(warm.parameters(), lr=lr)
    for _ in range(5):
        sgd_step(warm, warm_opt, problem, sampler.next())
    sampler = Sampler(problem.n_train, batch, seed, ctx.rank)
    barrier.wait(timeout=60)
    start = time.monotonic()
    ema, curve = None, []
    for step in range(1, steps + 1):
        loss = sgd_step(model, opt, problem, sampler.next(), lock)
        ema = loss if ema is None else 0.9 * ema + 0.1 * loss  # smooths minibatch noise
        if step % log_every == 0 or step == steps:
            curve.append((time.monotonic() - start, step, ema))
            if step % (log_every * 10) == 0:
                ctx.progress(step, steps, f"worker 0: update {step}/{steps}")
    end = time.monotonic()
    return {"start": start, "end": end, "steps": steps, "curve": curve}


def merged_curve(outs: list[dict[str, Any]]) -> list[tuple[float, int, float]]:
    """(time, total updates so far, mean of each worker's latest smoothed loss), by time."""
    t0 = min(o["start"] for o in outs)
    events = []
    for w, o in enumerate(outs):
        for t, step, loss in o["curve"]:
            events.append((o["start"] - t0 + t, w, step, loss))
    events.sort()
    latest: dict[int, tuple[int, float]] = {}
    merged = []
    for t, w, step, loss in events:
        latest[w] = (step, loss)
        total = sum(s for s, _ in latest.values())
        merged.append((t, total, sum(v for _, v in latest.values()) / len(latest)))
    return merged


def overlap_model(problem: str, workers: int, batch: int, nnz: int, features: int) -> float:
    """Chance that a weight written by one update is also written by a concurrent update of
    another worker (model tier): 1 for a dense model, ``1-(1-1/d)^(B*nnz*(w-1))`` for sparse."""
    if workers <= 1:
        return 0.0
    if problem != "sparse":
        return 1.0
    return 1.0 - (1.0 - 1.0 / features) ** (batch * nnz * (workers - 1))


# Cases the chapter tabulates: a dense model always collides; sparse ones rarely, unless the
# batch or the number of non-zeros per sample or of workers grows.
OVERLAP_CASES = (
    ("dense", 2, 32, 0),
    ("sparse", 2, 32, 10),
    ("sparse", 4, 32, 10),
    ("sparse", 2, 1, 10),
    ("sparse", 2, 32, 1),
)


def overlap_table(cases=OVERLAP_CASES, features: int = 2000):
    """:func:`overlap_model` for (problem, workers, batch, nnz) cases, as a DataFrame."""
    import pandas as pd

    return pd.DataFrame(
        {
            "model": problem,
            "workers": workers,
            "batch": batch,
            "nnz": nnz,
            "overlap": round(overlap_model(problem, workers, batch, nnz, features), 3),
        }
        for problem, workers, batch, nnz in cases
    )


def prewarm(problem: Problem) -> None:
    """One throwaway SGD step in the parent before forking: the first optimizer in a process
    imports ``torch._dynamo`` lazily (~1 s here, several seconds on a busy node); forked
    workers then inherit the imported modules instead of each paying for them. Only before a
    fork: on a GPU machine a backward pass here would break autograd in forked children."""
    model = problem.model()
    sgd_step(model, torch.optim.SGD(model.parameters(), lr=0.0), problem, torch.arange(2))


def train_hogwild(
    problem: Problem,
    workers: int,
    steps: int,
    batch: int,
    lr: float,
    *,
    threads: int = 1,
    locked: bool = False,
    seed: int = 0,
    progress: Progress | None = None,
) -> tuple[torch.nn.Module, list[dict[str, Any]]]:
    """Train a fresh shared model with ``workers`` processes, ``steps`` updates in total.

    Returns the trained model and each worker's output. The library entry point behind the
    ``hogwild`` experiment (and the tests: parallel vs serial on the convex problem).
    """
    import multiprocessing as mp

    method = start_method(_worker_entry)  # the launcher's policy: fork only where it is safe
    mpctx = mp.get_context(method)
    if method == "fork":
        prewarm(problem)
    model = problem.model()
    model.share_memory()  # parameters move to shared memory; forked workers write into them
    barrier = mpctx.Barrier(workers)
    lock = mpctx.Lock() if locked else None
    per_worker = [steps // workers + (1 if r < steps % workers else 0) for r in range(workers)]
    outs = launch(
        _worker_entry,
        workers,
        args=(problem, model, per_worker, batch, lr, seed, barrier, lock),
        backend="none",  # no process group: the workers talk only through shared memory
        device="cpu",  # host shared memory, even on a GPU node
        threads_per_rank=threads,
        start_method=method,
        progress=progress,
    )
    return model, outs


def _worker_entry(ctx: RankContext, problem, model, per_worker, batch, lr, seed, barrier, lock):
    return hogwild_worker(ctx, problem, model, per_worker[ctx.rank], batch, lr, seed, barrier, lock)
