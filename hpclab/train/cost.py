"""What a model costs: floating-point operations per sample, and activation checkpointing.

- :func:`flops_per_sample`: the operations of one training step (forward and backward) per
  sample, counted by PyTorch's ``FlopCounterMode`` (matrix multiplies and convolutions, 2 per
  multiply-add), for utilisation figures (achieved FLOP/s over the device's peak).
- :class:`Checkpointed`: the model's layers run in blocks whose activations are not kept for
  backward but recomputed there (``torch.utils.checkpoint``): memory for time.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn


def flops_per_sample(model: nn.Module, in_features: int) -> int:
    """Operations of one training step per sample: forward and backward of one sample, counted
    on a CPU copy (the count does not depend on the device; the model is left untouched)."""
    from torch.utils.flop_counter import FlopCounterMode

    probe = copy.deepcopy(getattr(model, "module", model)).cpu().float()
    x, y = torch.zeros(1, in_features), torch.zeros(1, dtype=torch.long)
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(probe(x), y).backward()
    return int(counter.get_total_flops())


class Checkpointed(nn.Module):
    """``module`` (an ``nn.Sequential``) run block by block (a block: a layer and what follows it
    up to the next layer), in segments of ``every`` blocks, each segment checkpointed: forward
    keeps only each segment's input, and backward recomputes the segment's activations (Chen et
    al. 2016: segments of about sqrt(L) of L blocks keep O(sqrt L) activations for about one
    extra forward). ``every=1`` checkpoints every block. The weights, and what training
    computes, are the same (:func:`hpclab.train.flat_params` looks through it)."""

    def __init__(self, module: nn.Sequential, every: int = 1) -> None:
        super().__init__()
        if not isinstance(module, nn.Sequential):
            raise ValueError(f"checkpointing needs an nn.Sequential, got {type(module).__name__}")
        self.module = module
        bounds = block_bounds(module)
        blocks = len(bounds) - 1
        if not isinstance(every, int) or not 1 <= every <= blocks:
            raise ValueError(
                f"checkpoint_every={every!r} for a model of {blocks} blocks; allowed: 1..{blocks}"
            )
        cuts = bounds[::every] + ([] if (blocks % every == 0) else [bounds[-1]])
        self.blocks = [module[a:b] for a, b in zip(cuts, cuts[1:], strict=False)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return x


def block_bounds(module: nn.Sequential) -> list[int]:
    """Indices where the blocks of ``module`` start, and its length: a block starts at each
    linear or convolution layer (anything before the first one joins the first block)."""
    starts = [i for i, m in enumerate(module) if isinstance(m, (nn.Linear, nn.Conv2d))]
    return sorted({0, *starts[1:], len(module)})
