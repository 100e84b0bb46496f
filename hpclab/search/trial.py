"""One trial of a hyper-parameter search: train the course's model with given settings, report
the validation loss (chapter 08).

The same function runs in every backend (one after another, as a Slurm array task, as a Celery
task), so their results are comparable: same data split, same training step
(:func:`hpclab.train.train_step`), same seed rule. A trial is small on purpose (scikit-learn's
digits, a few epochs): a search is dozens of them on two cores in quick mode.

``params`` keys: ``lr`` (SGD learning rate), ``momentum``, ``batch_size``, ``weight_decay``,
``model`` (a name of :data:`hpclab.train.MODELS` for flat inputs: ``tiny`` or ``large``).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from typing import Any

DEFAULTS: dict[str, Any] = {
    "lr": 0.05,
    "momentum": 0.0,
    "batch_size": 64,
    "weight_decay": 0.0,
    "model": "tiny",
}
VAL_FRACTION = 0.25


def _split(seed: int):
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
) -> dict[str, Any]:
    """Train with ``params`` for ``epochs``; return ``val_loss``, ``val_acc``, ``seconds``.

    ``samples`` > 0 trains on the first ``samples`` of the (fixed) training split only: quicker
    trials for quick mode; the validation split stays whole, so losses stay comparable.

    ``report(epoch, val_loss) -> stop`` is called after each epoch (a pruner's hook: return True
    to stop a hopeless trial early; the record then says ``pruned``). A diverged trial (loss NaN
    or infinite) ends at once with ``val_loss = inf``.

    ``save_to``: a file where the trained model is saved (:func:`save_model`), e.g. to serve it.
    """
    import torch
    import torch.nn.functional as F

    from hpclab.train import make_model, train_step

    p = {**DEFAULTS, **params}
    t0 = time.perf_counter()
    xt, yt, xv, yv = _split(seed)
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
    val_loss, pruned, done = math.inf, False, 0
    for epoch in range(epochs):
        order = torch.randperm(len(xt), generator=gen)
        for i in range(0, len(xt) - bs + 1, bs):
            idx = order[i : i + bs]
            loss = train_step(model, opt, xt[idx], yt[idx])
            if not math.isfinite(loss):
                break
        with torch.no_grad():
            model.eval()
            val_loss = float(F.cross_entropy(model(xv), yv))
            val_acc = float((model(xv).argmax(1) == yv).float().mean())
            model.train()
        done = epoch + 1
        if not math.isfinite(val_loss):
            val_loss = math.inf
            break
        if report is not None and report(epoch, val_loss):
            pruned = True
            break
    if save_to:
        save_model(model, p["model"], xt.shape[1], save_to)
    return {
        "val_loss": val_loss,
        "val_acc": val_acc if math.isfinite(val_loss) else 0.0,
        "epochs": done,
        "pruned": pruned,
        "seconds": time.perf_counter() - t0,
        "pid": os.getpid(),
    }


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
