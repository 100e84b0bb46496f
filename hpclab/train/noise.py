"""The gradient noise scale: the batch size past which a larger batch stops saving steps
(chapter 06, time to accuracy).

McCandlish, Kaplan, Amodei et al. 2018, "An Empirical Model of Large-Batch Training", measure
``B_simple = tr(Sigma) / |G|^2`` (the per-sample gradient variance over the squared true
gradient) and find the critical batch, where steps to a target stop halving as the batch doubles,
near it. Their unbiased estimator (appendix A.1) needs only gradient norms at two batch sizes
``b < B``: with ``|G_b|^2`` and ``|G_B|^2`` measured,

    |G|^2 ~ (B |G_B|^2 - b |G_b|^2) / (B - b)      S ~ (|G_b|^2 - |G_B|^2) / (1/b - 1/B)

and ``B_simple ~ mean(S) / mean(|G|^2)``, each averaged over many measurements before the ratio
(each alone is noisy). Here ``b`` is a chunk of a batch and ``B`` the batch: ``k`` chunk
gradients on one process, the very quantities data parallelism computes on ``k`` ranks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from hpclab.train.step import flat_grad


def norm_estimates(g_small_sq: float, g_big_sq: float, b: int, big: int) -> tuple[float, float]:
    """``(|G|^2, S)`` from the squared gradient norms at batch ``b`` and ``big`` (A.1)."""
    if not 0 < b < big:
        raise ValueError(f"noise scale: b={b}, B={big}; allowed: 0 < b < B")
    g2 = (big * g_big_sq - b * g_small_sq) / (big - b)
    s = (g_small_sq - g_big_sq) / (1 / b - 1 / big)
    return g2, s


@dataclass
class NoiseScale:
    """Running estimate of ``B_simple``: :meth:`measure` once in a while during training."""

    chunk: int = 64  # b, samples per small batch
    chunks: int = 16  # B = chunk x chunks
    g2: list[float] = field(default_factory=list)
    s: list[float] = field(default_factory=list)

    def measure(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, gen: torch.Generator):
        """Gradients of ``chunks`` random chunks of ``(x, y)`` at the model's current weights
        (the weights are not changed; gradients are cleared after)."""
        pick = torch.randint(0, len(x), (self.chunk * self.chunks,), generator=gen)
        grads = []
        for part in pick.view(self.chunks, self.chunk):
            model.zero_grad(set_to_none=True)
            F.cross_entropy(model(x[part]), y[part]).backward()
            grads.append(flat_grad(model).clone())
        model.zero_grad(set_to_none=True)
        g = torch.stack(grads)  # [chunks, params]
        small = float((g * g).sum(dim=1).mean())
        big = float(g.mean(dim=0).square().sum())
        g2, s = norm_estimates(small, big, self.chunk, self.chunk * self.chunks)
        self.g2.append(g2)
        self.s.append(s)

    @property
    def b_simple(self) -> float | None:
        """``mean(S) / mean(|G|^2)`` over the measurements so far (``None`` before any, or
        while the true gradient is lost in the noise)."""
        if not self.g2:
            return None
        g2 = sum(self.g2) / len(self.g2)
        return sum(self.s) / len(self.s) / g2 if g2 > 0 else None
