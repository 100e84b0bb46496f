"""Data, models and the one training step every chapter uses (chapters 01, 04, 05, 06).

No downloads: the data are scikit-learn's bundled 8x8 digits (1797 real images) or generated
MNIST-like images (class templates plus noise, learnable, any count and size). The models are
small on purpose: the lesson of Guan 2019 is that a small model (its MNIST net) stops scaling
across GPUs while a large one keeps going, so the course needs both sizes.

Shapes: images ``[N, C, H, W]`` float32 in [0, 1]; flat features ``[N, C*H*W]``; labels ``[N]``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn


def digits(flat: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's digits: X ``[1797, 64]`` (or ``[1797, 1, 8, 8]``) in [0, 1], y ``[1797]``."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.images, dtype=torch.float32) / 16.0  # pixel values are 0..16
    y = torch.tensor(data.target, dtype=torch.long)
    return (x.reshape(len(x), -1) if flat else x.unsqueeze(1)), y


def synthetic_images(
    n: int,
    shape: tuple[int, int, int] = (1, 28, 28),
    classes: int = 10,
    noise: float = 0.3,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """MNIST-like data: each class is a fixed random template; samples add Gaussian noise.

    Deterministic for a seed; ``X [n, *shape]`` float32 in [0, 1], ``y [n]`` int64.
    """
    if n < 1 or classes < 2:
        raise ValueError(f"need n >= 1 and classes >= 2, got n={n}, classes={classes}")
    gen = torch.Generator().manual_seed(seed)
    templates = torch.rand((classes, *shape), generator=gen)
    y = torch.randint(0, classes, (n,), generator=gen)
    x = templates[y] + noise * torch.randn((n, *shape), generator=gen)
    return x.clamp_(0.0, 1.0), y


def _tiny(in_features: int, classes: int) -> nn.Module:
    return nn.Sequential(nn.Linear(in_features, 128), nn.ReLU(), nn.Linear(128, classes))


def _large(in_features: int, classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(in_features, 1024),
        nn.ReLU(),
        nn.Linear(1024, 1024),
        nn.ReLU(),
        nn.Linear(1024, classes),
    )


def _deep(in_features: int, classes: int, layers: int = 24, width: int = 256) -> nn.Module:
    mods: list[nn.Module] = [nn.Linear(in_features, width), nn.ReLU()]
    for _ in range(layers - 2):
        mods += [nn.Linear(width, width), nn.ReLU()]
    mods.append(nn.Linear(width, classes))
    return nn.Sequential(*mods)


def _cnn(in_features: int, classes: int) -> nn.Module:
    side = int(round(in_features**0.5))
    if side * side != in_features:
        raise ValueError(f"cnn needs square images; in_features={in_features} is not a square")
    return nn.Sequential(
        nn.Unflatten(1, (1, side, side)),
        nn.Conv2d(1, 16, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(32 * 16, classes),
    )


# The one model registry (chapters 01, 04, 05, 06): name -> builder(in_features, classes).
# Every model takes flat features ``[N, in_features]`` and returns logits ``[N, classes]``.
MODELS: dict[str, Callable[[int, int], nn.Module]] = {
    "tiny": _tiny,  # MLP in-128-classes
    "large": _large,  # MLP in-1024-1024-classes: >= 10x tiny's parameters
    "deep": _deep,  # 24 layers of width 256: many small tensors (chapter 06's buckets)
    "cnn": _cnn,  # two conv layers + linear; square single-channel images only
}
MLP_MODELS = ("tiny", "large", "deep")  # the models that take any number of features


SHAPED = ("deep",)  # the models whose depth (linear layers) and width (features) can be chosen


def make_model(
    name: str,
    in_features: int = 64,
    classes: int = 10,
    seed: int = 0,
    *,
    depth: int | None = None,
    width: int | None = None,
) -> nn.Module:
    """A fresh model from :data:`MODELS`. Same seed, same initial weights (for the parallel ==
    serial tests of chapters 05 and 06). ``depth`` (linear layers) and ``width`` (features per
    hidden layer) reshape the models in :data:`SHAPED`; ``None`` keeps the model's own."""
    if name not in MODELS:
        raise ValueError(f"model={name!r} is not known; allowed: {', '.join(MODELS)}")
    shape = {k: v for k, v in (("layers", depth), ("width", width)) if v is not None}
    if shape and name not in SHAPED:
        raise ValueError(
            f"model={name!r} has a fixed shape; depth and width apply to: {', '.join(SHAPED)}"
        )
    if shape.get("layers", 2) < 2 or shape.get("width", 1) < 1:
        raise ValueError(f"depth={depth}, width={width}; allowed: depth >= 2, width >= 1")
    torch.manual_seed(seed)
    return MODELS[name](in_features, classes, **shape)


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def flat_params(model: nn.Module) -> torch.Tensor:
    """All parameters as one flat vector, in ``parameters()`` order (a detached copy; a DDP
    wrapper is looked through). Parallel == serial tests compare these (chapters 05, 06)."""
    module = getattr(model, "module", model)
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()])


def set_flat_params(model: nn.Module, flat: torch.Tensor) -> None:
    """Write a flat vector (as :func:`flat_params` returns) into the parameters, in place."""
    module = getattr(model, "module", model)
    with torch.no_grad():
        offset = 0
        for p in module.parameters():
            n = p.numel()
            p.copy_(flat[offset : offset + n].view_as(p))
            offset += n


def flat_grad(model: nn.Module) -> torch.Tensor:
    """All gradients as one dense flat vector (sparse gradients densified, missing ones 0):
    what a parameter-server worker pushes (chapter 05)."""
    module = getattr(model, "module", model)
    parts = []
    for p in module.parameters():
        g = p.grad
        if g is None:
            parts.append(torch.zeros(p.numel(), dtype=p.dtype, device=p.device))
        else:
            parts.append((g.to_dense() if g.is_sparse else g).reshape(-1))
    return torch.cat(parts)


def autocast(device: str, dtype: str) -> contextlib.AbstractContextManager:
    """Where a step runs in ``dtype``: nothing for fp32, else torch's autocast (matrix products
    in bf16/fp16, weights and their gradients stay fp32: chapter 09)."""
    if dtype == "fp32":
        return contextlib.nullcontext()
    if dtype not in ("bf16", "fp16"):
        raise ValueError(f"dtype={dtype!r} is not a training dtype here; allowed: fp32, bf16, fp16")
    half = torch.bfloat16 if dtype == "bf16" else torch.float16
    return torch.autocast(device.split(":")[0], dtype=half)


def grad_scaler(device: str, dtype: str) -> torch.amp.GradScaler | None:
    """A loss scaler for fp16 (its 5 exponent bits lose gradients under 2**-24 to zero; Micikevicius
    et al. 2018); ``None`` for fp32 and bf16 (bf16 has fp32's exponent range)."""
    return torch.amp.GradScaler(device.split(":")[0]) if dtype == "fp16" else None


def forward_backward(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.cross_entropy,
    scale: float = 1.0,
    scaler: torch.amp.GradScaler | None = None,
    dtype: str = "fp32",
) -> torch.Tensor:
    """Forward, loss and backward for one (micro-)batch; gradients add into ``.grad``.

    ``scale`` weights this chunk's loss (``len(chunk) / len(batch)`` for gradient accumulation,
    so the summed gradients equal the full batch's mean-loss gradient). ``scaler`` (fp16, chapter
    09) multiplies the loss by its loss scale before backward, so small gradients stay above
    fp16's smallest number; the gradients come out scaled and the scaler's ``step`` unscales
    them. ``dtype`` bf16/fp16 runs the forward and the loss under :func:`autocast` (backward
    follows in the forward's dtypes, as PyTorch advises). Returns the unscaled loss, detached
    (no device sync). On a DDP model the gradient all-reduce runs inside ``backward`` (chapter
    06), overlapped with the rest of backward.
    """
    with autocast(x.device.type, dtype):
        loss = loss_fn(model(x), y)
    weighted = loss * scale if scale != 1.0 else loss
    (scaler.scale(weighted) if scaler is not None else weighted).backward()
    return loss.detach()


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = F.cross_entropy,
    micro_batches: int = 1,
    lock: contextlib.AbstractContextManager | None = None,
    after_backward: Callable[[nn.Module], None] | None = None,
    scaler: torch.amp.GradScaler | None = None,
    dtype: str = "fp32",
) -> float:
    """One SGD step: forward, loss, backward, update. Returns the loss (a float: syncs device).

    ``after_backward(model)`` runs once the batch's gradients are in ``.grad`` and before the
    update: where hand-written data parallelism averages them over the ranks (chapter 06
    part 2's exercises), instead of spelling the step out again.

    ``lock`` (e.g. a ``multiprocessing.Lock``) is held around the update only: the naive,
    locked variant of chapter 05's Hogwild; without it, processes sharing the weights write
    into them lock-free (Hogwild!).

    ``micro_batches=k`` splits the batch into ``k`` chunks whose gradients accumulate before the
    one update (gradient accumulation, chapter 06). On a DDP model all chunks but the last run
    under ``model.no_sync()``, so gradients are all-reduced once per step, not once per chunk.

    ``dtype`` (fp32, bf16, fp16) is the precision of forward and loss (:func:`autocast`);
    ``scaler`` (a ``torch.amp.GradScaler``, for fp16: chapter 09) scales the loss before
    backward; its ``step`` unscales the gradients and skips the update when one is inf/NaN,
    and ``update`` adjusts the scale (halved after an overflow, doubled after 2000 good steps).
    """
    if micro_batches < 1 or micro_batches > len(x):
        raise ValueError(f"micro_batches={micro_batches} must be in 1..{len(x)} (the batch size)")
    optimizer.zero_grad(set_to_none=True)
    if micro_batches == 1:  # the common case, kept lean: chapter 05's steps take ~0.2 ms
        total = forward_backward(model, x, y, loss_fn, scaler=scaler, dtype=dtype)
    else:
        total = _accumulate(model, x, y, loss_fn, micro_batches, scaler, dtype)
    if after_backward is not None:
        after_backward(model)
    with lock if lock is not None else contextlib.nullcontext():
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)
            scaler.update()
    return float(total)


def _accumulate(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    micro_batches: int,
    scaler: torch.amp.GradScaler | None = None,
    dtype: str = "fp32",
) -> torch.Tensor:
    """Forward/backward over ``micro_batches`` chunks; returns the batch's mean loss."""
    chunks = list(zip(x.chunk(micro_batches), y.chunk(micro_batches), strict=True))
    total = torch.zeros((), device=x.device)
    for i, (xc, yc) in enumerate(chunks):
        last = i == len(chunks) - 1
        sync = contextlib.nullcontext() if last or not hasattr(model, "no_sync") else None
        with sync or model.no_sync():
            loss = forward_backward(model, xc, yc, loss_fn, len(xc) / len(x), scaler, dtype)
        total = total + loss * (len(xc) / len(x))
    return total


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of correct predictions."""
    model.eval()
    try:
        return float((model(x).argmax(dim=1) == y).float().mean())
    finally:
        model.train()
