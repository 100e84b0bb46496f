"""LARS and LAMB: layer-wise adaptive rates for large batches (chapter 06, time to accuracy).

PyTorch ships neither. Both scale each parameter tensor's ("layer's") update by a *trust
ratio* ``||w|| / ||update||``, so no layer moves by more than a set fraction of its own size,
whatever the global learning rate: what lets a batch of 8192+ train at a high rate.

- :class:`LARS` (You, Gitman and Ginsburg 2017, "Large Batch Training of Convolutional
  Networks", eqs. 6-7): local rate ``lam = eta * ||w|| / (||g|| + beta * ||w||)``;
  ``v <- m * v + gamma * lam * (g + beta * w)``; ``w <- w - v``.
- :class:`LAMB` (You et al. 2020, "Large Batch Optimization for Deep Learning: Training BERT in
  76 minutes", Algorithm 2, phi = identity): Adam's moments with bias correction,
  ``r = m_hat / (sqrt(v_hat) + eps)``; ``w <- w - gamma * ||w|| / ||r + lam * w|| * (r + lam * w)``.

A zero norm (a fresh bias at 0, a zero gradient) makes the local rate (LARS) or trust ratio
(LAMB) 1, as in the common implementations (torchlars, NVIDIA's LAMB).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


def _ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    ok = (num > 0) & (den > 0)
    return torch.where(ok, num / torch.where(ok, den, torch.ones_like(den)), torch.ones_like(num))


class LARS(torch.optim.Optimizer):
    """Layer-wise Adaptive Rate Scaling with momentum ``momentum`` (m), weight decay
    ``weight_decay`` (beta) and trust coefficient ``eta`` (the paper's 0.001)."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        eta: float = 0.001,
    ) -> None:
        if lr <= 0 or not 0 <= momentum < 1 or weight_decay < 0 or eta <= 0:
            raise ValueError(
                f"LARS: lr={lr}, momentum={momentum}, weight_decay={weight_decay}, eta={eta}; "
                "allowed: lr > 0, 0 <= momentum < 1, weight_decay >= 0, eta > 0"
            )
        defaults = {"lr": lr, "momentum": momentum, "weight_decay": weight_decay, "eta": eta}
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001 - torch's signature
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            beta, m = group["weight_decay"], group["momentum"]
            for w in group["params"]:
                if w.grad is None:
                    continue
                g = w.grad
                w_norm, g_norm = w.norm(), g.norm()
                local = _ratio(group["eta"] * w_norm, g_norm + beta * w_norm)
                update = g.add(w, alpha=beta).mul_(group["lr"] * local)
                state = self.state[w]
                v = state.get("momentum")
                if v is None:
                    v = state["momentum"] = torch.zeros_like(w)
                v.mul_(m).add_(update)
                w.sub_(v)
        return loss


class LAMB(torch.optim.Optimizer):
    """Layer-wise Adaptive Moments for Batch training: Adam's update, rescaled per tensor by
    ``||w|| / ||r + weight_decay * w||``."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
    ) -> None:
        b1, b2 = betas
        if lr <= 0 or not (0 <= b1 < 1 and 0 <= b2 < 1) or eps <= 0 or weight_decay < 0:
            raise ValueError(
                f"LAMB: lr={lr}, betas={betas}, eps={eps}, weight_decay={weight_decay}; "
                "allowed: lr > 0, 0 <= betas < 1, eps > 0, weight_decay >= 0"
            )
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay}
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001 - torch's signature
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            b1, b2 = group["betas"]
            for w in group["params"]:
                if w.grad is None:
                    continue
                state = self.state[w]
                if not state:
                    state["t"] = 0
                    state["m"] = torch.zeros_like(w)
                    state["v"] = torch.zeros_like(w)
                state["t"] += 1
                t, m, v = state["t"], state["m"], state["v"]
                m.mul_(b1).add_(w.grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(w.grad, w.grad, value=1 - b2)
                r = (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + group["eps"])
                u = r.add(w, alpha=group["weight_decay"])
                w.sub_(u.mul_(group["lr"] * _ratio(w.norm(), u.norm())))
        return loss
