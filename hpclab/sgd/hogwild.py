"""Chapter 05, Hogwild!: lock-free SGD by several processes on one shared-memory model.

The model's parameters live in shared memory (``model.share_memory()``); ``workers`` forked
processes each run plain SGD on their own minibatches and write into the same tensors with no
lock (Niu, Recht, Re, Wright, "Hogwild!", NIPS 2011; seed 004 shows PyTorch's version). The
naive alternative, ``locking="locked"``, takes one process lock around every update, with the
same interface. Serial SGD (one process, the same total number of updates) is the baseline.

Timing excludes the fork and a warm-up: every worker warms up on a private copy, then all wait
at a barrier, and the wall time runs from the barrier to the last worker's last update
(``time.monotonic`` is one clock for all processes on Linux).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from hpclab.config import Config, ConfigError, param
from hpclab.dist import RankContext, launch
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.sgd.problems import PROBLEMS, Problem, Sampler, make_problem

# Tuned once by hand on this course's problems (serial SGD, batch 32): the largest rates that
# stay stable for all of them.
DEFAULT_LR = {"dense": 0.1, "large": 0.05, "sparse": 1.0}
# "Reached" losses for the time-to-target figure: about what serial SGD reaches in a third of
# the default run.
DEFAULT_TARGET = {"dense": 0.3, "large": 0.3, "sparse": 0.55}
OVERSUBSCRIBE_LIMIT = 4  # refuse runs with more than 4 busy threads per usable core


def usable_cores() -> int:
    from hpclab.measure.sysinfo import usable_cores as _usable

    return _usable()[0]


@dataclass(frozen=True)
class HogwildConfig(Config):
    workers: int = param(2, min=1, max=64, help="worker processes sharing one model")
    threads: int = param(1, min=1, max=64, help="intra-op threads per worker")
    model: str = param("dense", choices=PROBLEMS, help="dense MLP, large MLP or sparse logreg")
    locking: str = param(
        "lockfree", choices=("lockfree", "locked"), help="Hogwild (no lock) or a lock per update"
    )
    updates: int = param(
        4000, min=10, max=1_000_000, quick=600, help="total SGD updates, split over the workers"
    )
    batch: int = param(32, min=1, max=1500, help="samples per update")
    lr: float = param(0.0, min=0.0, max=10.0, help="learning rate (0 = the model's default)")
    nnz: int = param(10, min=1, max=2000, help="features per sample (sparse model)")
    target_loss: float = param(0.0, min=0.0, max=10.0, help="loss to time (0 = model default)")
    serial: bool = param(True, help="also run serial SGD with the same updates, for the speedup")
    seed: int = param(0, min=0, max=2**31 - 1, help="seed of the data order and the weights")

    def check(self) -> None:
        busy = self.workers * self.threads
        cores = usable_cores()
        if busy > OVERSUBSCRIBE_LIMIT * cores:
            raise ConfigError(
                f"workers x threads = {self.workers} x {self.threads} = {busy} exceeds "
                f"{OVERSUBSCRIBE_LIMIT} x the {cores} usable cores of this allocation; "
                f"allowed: workers x threads <= {OVERSUBSCRIBE_LIMIT * cores}"
            )
        if self.updates < self.workers:
            raise ConfigError(f"updates={self.updates} must be >= workers={self.workers}")

    @property
    def learning_rate(self) -> float:
        return self.lr or DEFAULT_LR[self.model]

    @property
    def target(self) -> float:
        return self.target_loss or DEFAULT_TARGET[self.model]


def sgd_step(
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    problem: Problem,
    idx: torch.Tensor,
    lock: Any = None,
) -> float:
    """One SGD step on samples ``idx``; the write into the (shared) weights is under ``lock``
    when one is given (the naive, locked variant), else lock-free (Hogwild)."""
    opt.zero_grad(set_to_none=True)
    loss = problem.loss_fn(model(problem.x_train[idx]), problem.y_train[idx])
    loss.backward()
    if lock is None:
        opt.step()
    else:
        with lock:
            opt.step()
    return float(loss.detach())


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


def _merged_curve(outs: list[dict[str, Any]]) -> list[tuple[float, int, float]]:
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


def prewarm(problem: Problem) -> None:
    """One throwaway SGD step in the parent before forking: the first optimizer in a process
    imports ``torch._dynamo`` lazily (~1 s here, several seconds on a busy node); forked
    workers then inherit the imported modules instead of each paying for them."""
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

    mpctx = mp.get_context("fork")
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
        threads_per_rank=threads,
        start_method="fork",
        progress=progress,
    )
    return model, outs


def _worker_entry(ctx: RankContext, problem, model, per_worker, batch, lr, seed, barrier, lock):
    return hogwild_worker(ctx, problem, model, per_worker[ctx.rank], batch, lr, seed, barrier, lock)


def _time_to(curve: list[tuple[float, int, float]], target: float) -> float | None:
    for t, _, loss in curve:
        if loss <= target:
            return t
    return None


def run_hogwild(config: HogwildConfig, progress: Progress) -> Result:
    problem = make_problem(config.model, seed=config.seed, nnz=config.nnz)
    features = problem.make_model().weight.num_embeddings if config.model == "sparse" else 0
    cores = usable_cores()
    variants = []
    if config.serial and config.workers > 1:
        variants.append(("serial", 1, False))
    variants.append(
        (
            "locked" if config.locking == "locked" else "hogwild",
            config.workers,
            config.locking == "locked",
        )
    )
    summaries: list[dict[str, Any]] = []
    curves: list[dict[str, Any]] = []
    for i, (variant, workers, locked) in enumerate(variants):
        sub = Progress(
            lambda d, t, n, i=i: progress.update(i + d / max(t, 1), len(variants), n),
            progress.cancel_event,
        )
        model, outs = train_hogwild(
            problem,
            workers,
            config.updates,
            config.batch,
            config.learning_rate,
            threads=config.threads,
            locked=locked,
            seed=config.seed,
            progress=sub,
        )
        wall = max(o["end"] for o in outs) - min(o["start"] for o in outs)
        curve = _merged_curve(outs)
        summaries.append(
            {
                "kind": "summary",
                "variant": variant,
                "model": config.model,
                "workers": workers,
                "threads": config.threads,
                "oversubscribed": workers * config.threads > cores,
                "updates": config.updates,
                "wall_s": wall,
                "updates_per_s": config.updates / wall,
                "loss": problem.loss(model),
                "accuracy": problem.accuracy(model),
                "target_loss": config.target,
                "time_to_target_s": _time_to(curve, config.target),
                "overlap_model": overlap_model(
                    config.model, workers, config.batch, config.nnz, features
                ),
            }
        )
        curves += [
            {"kind": "curve", "variant": variant, "time_s": t, "update": u, "loss_smoothed": v}
            for t, u, v in curve
        ]
    serial_wall = summaries[0]["wall_s"] if summaries[0]["variant"] == "serial" else None
    for s in summaries:
        s["speedup_vs_serial"] = serial_wall / s["wall_s"] if serial_wall else None
    progress.update(len(variants), len(variants), "")
    return make_result("hogwild", config, summaries + curves)


def plot_hogwild(result: Result):
    """Smoothed training loss against wall time and against updates, one line per run."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("loss vs wall time", "loss vs updates"))
    summaries = [r for r in result.records if r.get("kind") == "summary"]
    for k, s in enumerate(summaries):
        name = f"{s['variant']} {s['workers']}x{s['threads']} ({s['model']})"
        pts = _curves_of(result.records, k)
        for col, xkey in ((1, "time_s"), (2, "update")):
            fig.add_scatter(
                x=[p[xkey] for p in pts],
                y=[p["loss_smoothed"] for p in pts],
                mode="lines",
                name=name,
                legendgroup=name,
                showlegend=col == 1,
                row=1,
                col=col,
            )
    fig.update_xaxes(title_text="seconds", row=1, col=1)
    fig.update_xaxes(title_text="updates (all workers)", row=1, col=2)
    fig.update_yaxes(title_text="smoothed minibatch loss", type="log", row=1, col=1)
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_layout(title="Hogwild!: the same updates, shared by processes", height=420)
    return fig


def _curves_of(records: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """The curve records that belong to the k-th summary (records come as runs of summaries
    followed by their curves, per result; concatenated results keep that order)."""
    runs: list[tuple[list[dict], list[dict]]] = []
    for r in records:
        if r.get("kind") == "summary":
            if not runs or runs[-1][1]:
                runs.append(([], []))
            runs[-1][0].append(r)
        elif r.get("kind") == "curve" and runs:
            runs[-1][1].append(r)
    seen = 0
    for summ, curv in runs:
        if k < seen + len(summ):
            variant = summ[k - seen]["variant"]
            return [c for c in curv if c["variant"] == variant]
        seen += len(summ)
    return []


def speedup_table(result: Result):
    """The summary records as a DataFrame (one row per run)."""
    import pandas as pd

    rows = [r for r in result.records if r.get("kind") == "summary"]
    return pd.DataFrame(rows).drop(columns=["kind", "tier"], errors="ignore")


__all__ = [
    "DEFAULT_LR",
    "HogwildConfig",
    "hogwild_worker",
    "overlap_model",
    "plot_hogwild",
    "run_hogwild",
    "sgd_step",
    "speedup_table",
    "train_hogwild",
]
