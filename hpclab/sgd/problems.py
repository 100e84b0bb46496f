"""Problems for chapter 05 (Hogwild! and parameter-server SGD): a dense and a sparse model.

- ``dense``: the ``tiny`` MLP of :mod:`hpclab.train` on scikit-learn's digits. Every step writes
  every weight, so concurrent Hogwild writers overwrite each other's progress all the time.
- ``large``: the ``large`` MLP (about 1.1 M parameters) on digits: big messages for a parameter
  server, so the server's link and update become the bottleneck.
- ``sparse``: logistic regression on sparse binary features, as an ``EmbeddingBag`` with sparse
  gradients. A sample touches ``nnz`` of ``features`` weights, so two concurrent steps rarely
  touch the same weight: the case Hogwild's convergence argument is about (Niu et al., 2011).
  It is convex, so parallel runs can be compared with serial SGD and the optimum.

Shapes: dense inputs ``[N, 64]`` float32; sparse inputs ``[N, nnz]`` int64 feature ids; labels
``[N]`` (class ids for digits, 0./1. floats for the sparse problem).
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from hpclab.dist.placement import torch_threads
from hpclab.train import digits, flat_grad, forward_backward, make_model, train_step

PROBLEMS = ("dense", "sparse", "large")


class SparseLogReg(nn.Module):
    """``p(y=1 | x) = sigmoid(sum_{j in x} w_j + b)``; ``x`` is ``[B, nnz]`` feature ids.

    ``EmbeddingBag(sparse=True)`` makes the gradient of ``w`` a sparse tensor holding only the
    touched rows, and ``torch.optim.SGD`` then writes only those rows: a sparse update.
    """

    def __init__(self, features: int) -> None:
        super().__init__()
        self.weight = nn.EmbeddingBag(features, 1, mode="sum", sparse=True)
        nn.init.zeros_(self.weight.weight)
        self.bias = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight(x).squeeze(1) + self.bias  # [B] logits


@dataclass
class Problem:
    """Data + a model factory + the loss; everything a worker needs for one SGD step."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    make_model: Callable[[], nn.Module]
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    binary: bool = False

    @property
    def n_train(self) -> int:
        return len(self.y_train)

    def model(self) -> nn.Module:
        return self.make_model()

    @torch.no_grad()
    def loss(self, model: nn.Module, test: bool = False) -> float:
        """Mean loss over the whole training (or test) set."""
        x, y = (self.x_test, self.y_test) if test else (self.x_train, self.y_train)
        return float(self.loss_fn(model(x), y))

    @torch.no_grad()
    def accuracy(self, model: nn.Module) -> float:
        """Fraction of held-out samples classified correctly."""
        out = model(self.x_test)
        pred = (out > 0).float() if self.binary else out.argmax(dim=1)
        return float((pred == self.y_test).float().mean())


def _digits_problem(name: str, seed: int) -> Problem:
    x, y = digits(flat=True)
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(1234))
    x, y = x[perm], y[perm]
    split = 1500  # 1500 train, 297 held out
    arch = "tiny" if name == "dense" else "large"
    return Problem(
        name,
        x[:split],
        y[:split],
        x[split:],
        y[split:],
        functools.partial(make_model, arch, in_features=64, classes=10, seed=seed),
        F.cross_entropy,
    )


def sparse_data(
    n: int, features: int, nnz: int, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sparse logistic data: ``x [n, nnz]`` feature ids per row, ``y [n]`` in {0., 1.}
    drawn from a true weight vector ``w_true [features]`` (labels are noisy, so the optimum is
    finite and the problem is not separable)."""
    gen = torch.Generator().manual_seed(seed)
    w_true = torch.randn(features, generator=gen) * (2.0 / nnz**0.5)
    # Ids drawn with replacement: a repeated id in a row (rare when nnz << features) just
    # counts twice in the sum.
    x = torch.randint(0, features, (n, nnz), generator=gen)
    logits = w_true[x].sum(dim=1)
    y = (torch.rand(n, generator=gen) < torch.sigmoid(logits)).float()
    return x, y, w_true


def _sparse_problem(seed: int, features: int, nnz: int, n: int = 20000) -> Problem:
    x, y, _ = sparse_data(n + 2000, features, nnz, seed=77)
    return Problem(
        "sparse",
        x[:n],
        y[:n],
        x[n:],
        y[n:],
        functools.partial(SparseLogReg, features),
        F.binary_cross_entropy_with_logits,
        binary=True,
    )


def make_problem(name: str, seed: int = 0, features: int = 2000, nnz: int = 10) -> Problem:
    """``dense`` | ``large`` | ``sparse``; ``features``/``nnz`` only shape the sparse one.

    The sparse default (2000 features, 10 per sample, 20000 samples) is not separable, so its
    optimum is finite (about 0.41 mean log-loss, :func:`optimum_loss`)."""
    if name in ("dense", "large"):
        return _digits_problem(name, seed)
    if name == "sparse":
        if not 1 <= nnz <= features:
            raise ValueError(f"nnz={nnz} must be in 1..features={features}")
        return _sparse_problem(seed, features, nnz)
    raise ValueError(f"problem={name!r} is not known; allowed: {', '.join(PROBLEMS)}")


class Sampler:
    """Minibatch indices for one stream (a worker or trainer): deterministic per (seed, stream).

    Serial SGD with the combined batch draws from streams ``0..n-1`` in the same order as ``n``
    synchronous trainers do, so the two can be compared exactly.
    """

    def __init__(self, n: int, batch: int, seed: int, stream: int) -> None:
        self.n, self.batch = n, batch
        self.gen = torch.Generator().manual_seed(1_000_003 * seed + 7919 * stream + 1)

    def next(self) -> torch.Tensor:
        return torch.randint(0, self.n, (self.batch,), generator=self.gen)


def grad_at(problem: Problem, model: nn.Module, idx: torch.Tensor) -> tuple[float, torch.Tensor]:
    """Loss and flat gradient of the mean loss over samples ``idx`` at the model's weights."""
    model.zero_grad(set_to_none=True)
    loss = forward_backward(model, problem.x_train[idx], problem.y_train[idx], problem.loss_fn)
    return float(loss), flat_grad(model)


def serial_sgd(
    problem: Problem, steps: int, batch: int, lr: float, seed: int = 0, streams: int = 1
) -> nn.Module:
    """Plain SGD: step ``s`` uses the concatenated batches of streams ``0..streams-1`` (the
    combined batch of ``streams`` synchronous trainers). Runs on one thread, like a worker:
    these steps are far too small for intra-op threads, which only add synchronisation."""
    with torch_threads(1):
        return _serial_sgd(problem, steps, batch, lr, seed, streams)


def _serial_sgd(
    problem: Problem, steps: int, batch: int, lr: float, seed: int, streams: int
) -> nn.Module:
    model = problem.model()
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    samplers = [Sampler(problem.n_train, batch, seed, s) for s in range(streams)]
    for _ in range(steps):
        idx = torch.cat([s.next() for s in samplers])
        train_step(model, opt, problem.x_train[idx], problem.y_train[idx], problem.loss_fn)
    return model


def optimum_loss(problem: Problem, iters: int = 200) -> float:
    """Full-batch L-BFGS on the training loss (a convex problem's optimum; model tier)."""
    model = problem.model()
    # L-BFGS needs dense gradients: copy the sparse model into a dense twin.
    if isinstance(model, SparseLogReg):
        dense = copy.deepcopy(model)
        dense.weight = nn.EmbeddingBag(model.weight.num_embeddings, 1, mode="sum", sparse=False)
        nn.init.zeros_(dense.weight.weight)
        model = dense
    opt = torch.optim.LBFGS(
        model.parameters(), lr=1.0, max_iter=iters, line_search_fn="strong_wolfe"
    )

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = problem.loss_fn(model(problem.x_train), problem.y_train)
        loss.backward()
        return loss

    opt.step(closure)
    return problem.loss(model)
