"""The optimizer and learning-rate schedule a :class:`~hpclab.train.TrainSpec` names.

Extension points for the chapters after 08 (memory and precision) and chapter 06's time to
accuracy: the default, SGD at a constant rate, is what chapters 06 to 08 train with; LARS and
LAMB (:mod:`hpclab.train.layerwise`) are the large-batch optimizers. :func:`scaled_lr` is the
learning-rate rule as the global batch grows (none, linear, square root).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

OPTIMIZERS = ("sgd", "sgd-momentum", "adam", "adamw", "lars", "lamb")
SCHEDULES = ("constant", "warmup-decay", "warmup-constant")
LR_RULES = ("none", "linear", "sqrt")  # how the base rate grows with the global batch
WARMUP_SCHEDULES = ("warmup-decay", "warmup-constant")


def scaled_lr(rule: str, base_lr: float, base_batch: int, global_batch: int) -> float:
    """The rate for ``global_batch`` from ``base_lr`` tuned at ``base_batch``: unchanged
    (``none``), times ``k = global_batch / base_batch`` (``linear``, Goyal et al. 2017) or times
    ``sqrt(k)`` (``sqrt``, Krizhevsky 2014; Hoffer et al. 2017)."""
    k = global_batch / base_batch
    if rule == "none":
        return base_lr
    if rule == "linear":
        return base_lr * k
    if rule == "sqrt":
        return base_lr * k**0.5
    raise ValueError(f"lr rule={rule!r} is not known; allowed: {', '.join(LR_RULES)}")


def make_optimizer(name: str, params: Iterable[torch.nn.Parameter], lr: float):
    """A fresh optimizer over ``params``: plain SGD (no momentum), SGD with momentum 0.9 (one
    state tensor per parameter: chapter 09), Adam, or AdamW (decoupled weight decay, PyTorch's
    default 0.01), the other settings PyTorch's defaults; or LARS
    (momentum 0.9, trust coefficient 0.001) or LAMB (Adam's betas), both without weight decay."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr)
    if name in ("lars", "lamb"):
        from hpclab.train.layerwise import LAMB, LARS

        return (LARS if name == "lars" else LAMB)(params, lr=lr)
    raise ValueError(f"optimizer={name!r} is not known; allowed: {', '.join(OPTIMIZERS)}")


def lr_factor(name: str, step: int, total: int, warmup: int) -> float:
    """The multiple of the base rate at ``step`` (0-based) of ``total``: 1 throughout
    (``constant``), or a linear warm-up over ``warmup`` steps to the base rate, then a linear
    decay that reaches 0 after the last step (``warmup-decay``) or the base rate held
    (``warmup-constant``: Goyal et al. 2017's gradual warm-up, for runs to a target)."""
    if name == "constant":
        return 1.0
    if name not in WARMUP_SCHEDULES:
        raise ValueError(f"schedule={name!r} is not known; allowed: {', '.join(SCHEDULES)}")
    if step < warmup:
        return (step + 1) / warmup
    if name == "warmup-constant":
        return 1.0
    return max(0.0, (total - step) / max(1, total - warmup))


def make_schedule(name: str, optimizer, total: int, warmup: int):
    """A scheduler to step once per training step, or ``None`` for a constant rate (so the
    default run does exactly what it did before schedules existed)."""
    if name == "constant":
        return None
    lr_factor(name, 0, total, warmup)  # refuses an unknown name here, before training
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: lr_factor(name, k, total, warmup))
