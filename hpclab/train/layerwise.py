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


class _Layerwise(torch.optim.Optimizer):
    """What LARS and LAMB share: validated hyper-parameters, and a step that updates each
    parameter tensor with a gradient on its own (its norm is the layer's)."""

    def __init__(self, params: Iterable[torch.nn.Parameter], ok: bool, allowed: str, **defaults):
        if not ok:
            given = ", ".join(f"{k}={v}" for k, v in defaults.items())
            raise ValueError(f"{type(self).__name__}: {given}; allowed: {allowed}")
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):  # noqa: ANN001 - torch's signature
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            for w in group["params"]:
                if w.grad is not None:
                    self._update(w, group, self.state[w])
        return loss

    def _update(self, w: torch.Tensor, group: dict, state: dict) -> None:
        raise NotImplementedError


class LARS(_Layerwise):
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
        ok = lr > 0 and 0 <= momentum < 1 and weight_decay >= 0 and eta > 0
        allowed = "lr > 0, 0 <= momentum < 1, weight_decay >= 0, eta > 0"
        super().__init__(
            params, ok, allowed, lr=lr, momentum=momentum, weight_decay=weight_decay, eta=eta
        )

    def _update(self, w: torch.Tensor, group: dict, state: dict) -> None:
        beta, g = group["weight_decay"], w.grad
        w_norm, g_norm = w.norm(), g.norm()
        local = _ratio(group["eta"] * w_norm, g_norm + beta * w_norm)
        update = g.add(w, alpha=beta).mul_(group["lr"] * local)
        v = state.get("momentum")
        if v is None:
            v = state["momentum"] = torch.zeros_like(w)
        v.mul_(group["momentum"]).add_(update)
        w.sub_(v)


class LAMB(_Layerwise):
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
        ok = lr > 0 and 0 <= b1 < 1 and 0 <= b2 < 1 and eps > 0 and weight_decay >= 0
        allowed = "lr > 0, 0 <= betas < 1, eps > 0, weight_decay >= 0"
        super().__init__(
            params, ok, allowed, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay
        )

    def _update(self, w: torch.Tensor, group: dict, state: dict) -> None:
        b1, b2 = group["betas"]
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
