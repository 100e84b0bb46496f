"""One trial of a hyper-parameter search: train the course's model with given settings, report
the validation loss (chapter 07's job array, chapter 08's search).

The same function runs in every backend (one after another, as a Slurm array task, as a submitit
job, as a Celery task), so their results are comparable: same data split, same training step
(:func:`hpclab.train.train_step`), same seed rule. A trial is small on purpose (scikit-learn's
digits, a few epochs): a search is dozens of them on two cores in quick mode.

:func:`timed_trials` is what a fresh process runs (a Slurm array task, a submitit job): it says
when the job launched the process, loads torch and the data split (the
start-up a warm Celery worker pays once), then runs its trials and stamps each with wall-clock
times, so the notebook can split a trial's overhead into queue wait, start-up and the rest.

``params`` keys: ``lr`` (SGD learning rate), ``momentum``, ``batch_size``, ``weight_decay``,
``model`` (a name of :data:`hpclab.train.MODELS` for flat inputs: ``tiny`` or ``large``).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

DEFAULTS: dict[str, Any] = {
    "lr": 0.05,
    "momentum": 0.0,
    "batch_size": 64,
    "weight_decay": 0.0,
    "model": "tiny",
}
VAL_FRACTION = 0.25


def digits_split(seed: int):
    """The digits' training and validation tensors (x, y, x_val, y_val): one fixed split for
    every trial, worker and served model (``seed`` does not change it)."""
    import torch

    from hpclab.train import digits

    x, y = digits(flat=True)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1234))  # fixed split
    n_val = int(len(x) * VAL_FRACTION)
    val, train = order[:n_val], order[n_val:]
    return x[train], y[train], x[val], y[val]


def run_trial(
    params: dict[str, Any],
    epochs: int = 4,
    seed: int = 0,
    report: Callable[[int, float], bool] | None = None,
    samples: int = 0,
    save_to: str | None = None,
    threads: int = 1,
    checkpoint: str | None = None,
) -> dict[str, Any]:
    """Train with ``params`` for ``epochs``; return ``val_loss``, ``val_acc``, ``seconds``.

    A trial trains with ``threads`` torch threads (default one, on every backend): a search
    gets its parallelism from trials side by side, and a trial in this kernel gets the same
    resources as one on a worker or in an array task, so their times compare.

    ``samples`` > 0 trains on the first ``samples`` of the (fixed) training split only: quicker
    trials for quick mode; the validation split stays whole, so losses stay comparable.

    ``report(epoch, val_loss) -> stop`` is called after each epoch (a pruner's hook: return True
    to stop a hopeless trial early; the record then says ``pruned``). A diverged trial (loss NaN
    or infinite) ends at once with ``val_loss = inf``.

    ``save_to``: a file where the trained model is saved (:func:`save_model`), e.g. to serve it.

    ``checkpoint``: a file holding the trial's state after its last epoch (model, optimizer,
    shuffling generator, losses so far): when it exists the trial resumes there and trains up to
    ``epochs`` in all (a promoted trial of a synchronous rung, chapter 08, does not retrain); it
    is written again at the end. ``curve`` in the result: the validation loss after each epoch
    (resumed ones included); ``seconds``: this call's compute only.
    """
    from hpclab.dist.placement import torch_threads

    with torch_threads(threads):
        return _train(params, epochs, seed, report, samples, save_to, checkpoint)


def _train(params, epochs, seed, report, samples, save_to, checkpoint) -> dict[str, Any]:
    import torch

    from hpclab.train import make_model

    p = {**DEFAULTS, **params}
    started_at = time.time()  # wall clock: comparable across processes on synchronised nodes
    t0 = time.perf_counter()
    xt, yt, xv, yv = digits_split(seed)
    if samples:
        xt, yt = xt[:samples], yt[:samples]
    model = make_model(p["model"], in_features=xt.shape[1], seed=seed)
    opt = torch.optim.SGD(
        model.parameters(),
        lr=float(p["lr"]),
        momentum=float(p["momentum"]),
        weight_decay=float(p["weight_decay"]),
    )
    gen = torch.Generator().manual_seed(seed)
    bs = int(p["batch_size"])
    val_loss, val_acc, pruned, curve = math.inf, 0.0, False, []
    if checkpoint and os.path.exists(checkpoint):
        curve, val_acc = _resume(checkpoint, model, opt, gen)
        val_loss = curve[-1] if curve else math.inf
    done = len(curve)
    for epoch in range(done, epochs):
        _epoch(model, opt, xt, yt, bs, gen)
        val_loss, val_acc = _validate(model, xv, yv)
        done = epoch + 1
        curve.append(val_loss if math.isfinite(val_loss) else math.inf)
        if not math.isfinite(val_loss):
            val_loss = math.inf
            break
        # a trial told to stop after its last epoch has finished: it is not "stopped"
        if report is not None and report(epoch, val_loss) and done < epochs:
            pruned = True
            break
    if save_to:
        save_model(model, p["model"], xt.shape[1], save_to)
    if checkpoint:
        _save_state(checkpoint, model, opt, gen, curve, val_acc)
    return {
        "val_loss": val_loss,
        "val_acc": val_acc if math.isfinite(val_loss) else 0.0,
        "epochs": done,
        "curve": curve,
        "pruned": pruned,
        "seconds": time.perf_counter() - t0,
        "started_at": started_at,
        "pid": os.getpid(),
    }


def _epoch(model, opt, xt, yt, batch_size: int, gen) -> None:
    """One pass over the training split in a fresh shuffle from ``gen``, in whole batches (the
    remainder is dropped); it ends at the first loss that is not finite (a diverged trial)."""
    import torch

    from hpclab.train import train_step

    order = torch.randperm(len(xt), generator=gen)
    for i in range(0, len(xt) - batch_size + 1, batch_size):
        idx = order[i : i + batch_size]
        loss = train_step(model, opt, xt[idx], yt[idx])
        if not math.isfinite(loss):
            break


def _validate(model, xv, yv) -> tuple[float, float]:
    """(loss, accuracy) of ``model`` on the validation split, in eval mode."""
    import torch
    import torch.nn.functional as F

    with torch.no_grad():
        model.eval()
        val_loss = float(F.cross_entropy(model(xv), yv))
        val_acc = float((model(xv).argmax(1) == yv).float().mean())
        model.train()
    return val_loss, val_acc


def _save_state(path: str, model, opt, gen, curve: list[float], val_acc: float) -> None:
    """The trial after its last epoch, written atomically (a reader never sees half a file)."""
    import torch

    state = {"model": model.state_dict(), "opt": opt.state_dict(), "gen": gen.get_state(),
             "curve": curve, "val_acc": val_acc}  # fmt: skip
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)


def _resume(path: str, model, opt, gen) -> tuple[list[float], float]:
    import torch

    state = torch.load(path, weights_only=True)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    gen.set_state(state["gen"])
    return list(state["curve"]), float(state["val_acc"])


def timed_trials(
    points: list[dict[str, Any]], epochs: int, seed: int, samples: int = 0,
    checkpoints: list[str] | None = None,
) -> Iterator[dict[str, Any]]:  # fmt: skip
    """Run ``points`` one after another in this (fresh) process, yielding each result as it
    is done; each also carries
    ``process_start`` (when the job launched this Python process: ``$HPCLAB_LAUNCHED_AT``,
    stamped by the job script, else psutil's creation time), ``startup_s`` (process start to the
    first trial: interpreter, imports, data split; 0 for later trials), ``finished_at`` and the
    ``node``. ``checkpoints``: one file per point (:func:`run_trial`'s ``checkpoint``)."""
    import psutil

    stamp = os.environ.get("HPCLAB_LAUNCHED_AT", "")
    try:
        process_start = float(stamp)
    except ValueError:
        process_start = psutil.Process().create_time()
    # Start-up, timed apart from the trials: torch, scikit-learn, the data, and one training
    # step (a fresh process's first step pays for lazy initialisation, ~1 s here).
    if points:
        run_trial(points[0], epochs=1, seed=seed, samples=int(points[0].get("batch_size", 64)))
    for k, params in enumerate(points):
        ckpt = checkpoints[k] if checkpoints else None
        res = run_trial(params, epochs=epochs, seed=seed, samples=samples, checkpoint=ckpt)
        res.update(
            process_start=process_start,
            startup_s=max(0.0, res["started_at"] - process_start) if k == 0 else 0.0,
            finished_at=time.time(),
            node=os.environ.get("SLURMD_NODENAME", ""),
        )
        yield res


def fresh_trials(
    points: list[dict[str, Any]], epochs: int, seed: int, samples: int = 0
) -> list[dict[str, Any]]:
    """:func:`timed_trials` as a list: the function a submitit job runs (a result is pickled)."""
    return list(timed_trials(points, epochs, seed, samples))


def save_model(model: Any, name: str, in_features: int, path: str) -> None:
    """The model's name, input width and weights, enough for :func:`load_model` to rebuild it."""
    import torch

    blob = {"model": name, "in_features": int(in_features), "state": model.state_dict()}
    torch.save(blob, path)


def load_model(path: str) -> Any:
    """The model :func:`save_model` wrote, in eval mode (weights only: no code is unpickled)."""
    import torch

    from hpclab.train import make_model

    blob = torch.load(path, weights_only=True)
    model = make_model(blob["model"], in_features=blob["in_features"])
    model.load_state_dict(blob["state"])
    return model.eval()
