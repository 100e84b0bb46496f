"""ZeRO stage 1 written by hand: the optimizer state sharded over the ranks (chapter 09, part 2).

Rajbhandari et al. 2020 ("ZeRO", §5.1 and §7.2.1): every rank keeps the whole model and computes
the whole gradient, but owns the optimizer state of only 1/N of the parameters. One step::

    flat gradient [P]  --reduce-scatter (sum), / N-->  my slice of the mean gradient [P/N]
    inner optimizer steps my slice of the flat parameters (its state: 1/N of Adam's 8 bytes)
    my updated slice [P/N]  --all-gather-->  the whole flat parameter vector [P] on every rank

A reduce-scatter plus an all-gather is exactly what a ring all-reduce does, so ZeRO-1 sends what
DDP sends (2 (N-1)/N x P values per rank) and saves 1/N of the optimizer state for nothing.
torch's ``ZeroRedundancyOptimizer`` reaches the same state saving differently: DDP's all-reduce
of the whole gradient, then each rank broadcasts the parameters it owns.

The parameters are re-pointed into one flat buffer (``flat``: each tensor 64-byte aligned, the
whole padded to a multiple of N), so a
rank's slice is a view whose in-place update *is* the model's update. Adam is elementwise, so
stepping one flat slice equals stepping the tensors it came from. With one process (no process
group) it is the plain optimizer on one flat vector.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch

ALIGN = 16  # fp32 values in 64 bytes


def _world() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


class Zero1Optimizer:
    """``make_inner([param])`` builds the real optimizer over this rank's flat slice."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        make_inner: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer],
    ) -> None:
        self.params = [p for p in params if p.requires_grad]
        self.rank, self.world = _world()
        # each tensor starts on a 64-byte boundary, as the allocator's own tensors do, so
        # vectorised kernels see the same alignment as on the model's separate tensors
        self.offsets = [0]
        for p in self.params:
            self.offsets.append(self.offsets[-1] + -(-p.numel() // ALIGN) * ALIGN)
        self.shard = -(-self.offsets[-1] // self.world)  # ceil: all slices the same length
        first = self.params[0]
        self.flat = torch.zeros(self.shard * self.world, dtype=first.dtype, device=first.device)
        with torch.no_grad():
            for p, offset in zip(self.params, self.offsets, strict=False):
                n = p.numel()  # the model's parameters become views of one flat buffer
                self.flat[offset : offset + n].copy_(p.reshape(-1))
                p.data = self.flat[offset : offset + n].view_as(p)
        lo = self.rank * self.shard
        self.mine = torch.nn.Parameter(self.flat[lo : lo + self.shard])  # a view: shares bytes
        self.inner = make_inner([self.mine])

    @property
    def param_groups(self) -> list[dict]:
        return self.inner.param_groups

    @property
    def state(self) -> dict:
        return self.inner.state

    def held(self) -> list[torch.Tensor]:
        """Tensors this optimizer holds besides the model's (the flat buffer it owns)."""
        return [self.flat]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def flat_grad(self) -> torch.Tensor:
        """Every gradient at its parameter's place in one flat vector (zeros elsewhere)."""
        grad = torch.zeros_like(self.flat)
        for p, offset in zip(self.params, self.offsets, strict=False):
            if p.grad is not None:
                grad[offset : offset + p.numel()].copy_(p.grad.reshape(-1))
        return grad

    @torch.no_grad()
    def step(self) -> None:
        grad = self.flat_grad()
        if self.world > 1:
            import torch.distributed as dist

            mine = grad.new_empty(self.shard)
            # SUM then divide: the mean gradient whatever a backend does with ReduceOp.AVG
            dist.reduce_scatter_tensor(mine, grad)
            grad = mine.div_(self.world)
        self.mine.grad = grad
        self.inner.step()
        self.mine.grad = None
        if self.world > 1:
            import torch.distributed as dist

            dist.all_gather_into_tensor(self.flat, self.mine.detach().clone())
