"""The data sets a :class:`~hpclab.train.TrainSpec` names, and the held-out validation split.

- ``synthetic``: MNIST-like images (:func:`~hpclab.train.synthetic_images`), ``side**2``
  features; what chapters 06 to 08 time (the default).
- ``digits``: scikit-learn's 1797 real 8x8 digits (64 features; ``side`` must be 8).
- ``teacher``: a generated task for time to accuracy (chapter 06): the labels of a fixed random
  *teacher* network on Gaussian inputs, a share of them replaced by random labels (label noise),
  so no student reaches 100 % and the target accuracy takes several epochs at a small batch.
  Any number of samples (the 1348 training digits are too few for a batch of 8192).

Every builder returns ``(x [n, features], y [n])``; :func:`split` keeps the last
``val_samples`` of them apart, never trained on. The same seed gives the same data on every rank.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from hpclab.train.step import digits, synthetic_images

TEACHER_FEATURES = 8  # inputs of the teacher task
TEACHER_HIDDEN = 64  # the teacher's hidden width
LABEL_NOISE = 0.2  # share of teacher labels replaced by uniformly random ones
CLASSES = 10


def teacher_task(
    n: int, features: int = TEACHER_FEATURES, noise: float = LABEL_NOISE, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` Gaussian inputs ``[n, features]`` labelled by a fixed random two-layer tanh network
    (its weights depend on ``features`` only, so every ``seed`` asks the same question); a share
    ``noise`` of the labels is replaced by uniform ones: the best accuracy is about
    ``1 - noise + noise / 10``."""
    if n < 1 or not 0.0 <= noise < 1.0:
        raise ValueError(f"teacher task: n={n}, noise={noise}; allowed: n >= 1, 0 <= noise < 1")
    teacher = torch.Generator().manual_seed(12345)  # the one teacher
    w1 = torch.randn((features, TEACHER_HIDDEN), generator=teacher) / features**0.5
    w2 = torch.randn((TEACHER_HIDDEN, CLASSES), generator=teacher) * 2.0
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn((n, features), generator=gen)
    y = (torch.tanh(x @ w1 * 2.0) @ w2).argmax(dim=1)
    flip = torch.rand(n, generator=gen) < noise
    y[flip] = torch.randint(0, CLASSES, (int(flip.sum()),), generator=gen)
    return x, y


def _synthetic(n: int, side: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = synthetic_images(n, (1, side, side), seed=seed)
    return x.reshape(n, -1), y


def _digits(n: int, side: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    if side != 8:
        raise ValueError(f"data='digits' has 8x8 images; side={side}; allowed: side=8")
    x, y = digits(flat=True)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))[:n]
    return x[order], y[order]


def _teacher(n: int, side: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    return teacher_task(n, seed=seed)


# The one data-set registry of the engine: name -> builder(samples, side, seed).
DATASETS: dict[str, Callable[[int, int, int], tuple[torch.Tensor, torch.Tensor]]] = {
    "synthetic": _synthetic,
    "digits": _digits,
    "teacher": _teacher,
}


def features_of(name: str, side: int) -> int:
    """Input features of a data set's samples (what the model's first layer takes)."""
    return TEACHER_FEATURES if name == "teacher" else side * side


def load(
    name: str, samples: int, val_samples: int, side: int, seed: int
) -> tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]:
    """``(x_train, y_train), (x_val, y_val)``: ``samples`` to train on and ``val_samples``
    held out (0: an empty validation split)."""
    if name not in DATASETS:
        raise ValueError(f"data={name!r} is not known; allowed: {', '.join(DATASETS)}")
    x, y = DATASETS[name](samples + val_samples, side, seed)
    if len(x) < samples + val_samples:
        raise ValueError(
            f"data={name!r} has {len(x)} samples; samples + val_samples = "
            f"{samples + val_samples}; allowed: at most {len(x)}"
        )
    return (x[:samples], y[:samples]), (x[samples:], y[samples:])
