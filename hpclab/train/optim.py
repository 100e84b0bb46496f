"""The optimizer and learning-rate schedule a :class:`~hpclab.train.TrainSpec` names.

Extension points for the chapters after 08 (memory and precision, time to accuracy): the
default, SGD at a constant rate, is what chapters 06 to 08 train with. Room for LARS/LAMB: one
more name in :data:`OPTIMIZERS` and one more branch in :func:`make_optimizer`.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

OPTIMIZERS = ("sgd", "sgd-momentum", "adam", "adamw")
SCHEDULES = ("constant", "warmup-decay")


def make_optimizer(name: str, params: Iterable[torch.nn.Parameter], lr: float):
    """A fresh optimizer over ``params``: plain SGD (no momentum), SGD with momentum 0.9 (one
    state tensor per parameter: chapter 09), Adam, or AdamW (decoupled weight decay, PyTorch's
    default 0.01); the other settings are PyTorch's defaults."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr)
    raise ValueError(f"optimizer={name!r} is not known; allowed: {', '.join(OPTIMIZERS)}")


def lr_factor(name: str, step: int, total: int, warmup: int) -> float:
    """The multiple of the base rate at ``step`` (0-based) of ``total``: 1 throughout
    (``constant``), or a linear warm-up over ``warmup`` steps to the base rate, then a linear
    decay that reaches 0 after the last step (``warmup-decay``)."""
    if name == "constant":
        return 1.0
    if name != "warmup-decay":
        raise ValueError(f"schedule={name!r} is not known; allowed: {', '.join(SCHEDULES)}")
    if step < warmup:
        return (step + 1) / warmup
    return max(0.0, (total - step) / max(1, total - warmup))


def make_schedule(name: str, optimizer, total: int, warmup: int):
    """A scheduler to step once per training step, or ``None`` for a constant rate (so the
    default run does exactly what it did before schedules existed)."""
    if name == "constant":
        return None
    lr_factor(name, 0, total, warmup)  # refuses an unknown name here, before training
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: lr_factor(name, k, total, warmup))
