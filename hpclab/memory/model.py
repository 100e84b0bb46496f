"""The bytes a training step needs, as a formula (chapter 09; chapter 06 part 2 uses it too).

Per parameter, by what training keeps (Rajbhandari et al. 2020, "ZeRO", section 3.1):

    fp32 training     4 weights + 4 gradients + 4 x states          (Adam: 2 states -> 16)
    mixed precision   2 half weights + 2 half gradients + 4 fp32 master weights + 4 x states
                      (Adam: 2 + 2 + 4 + 8 = 16 bytes per parameter, the planner's figure)
    torch autocast    weights and gradients stay fp32 (4 + 4 + 4 x states) and each step adds a
                      half copy of the weights (2) for as long as backward needs it

States per parameter: SGD 0, SGD with momentum 1, Adam/AdamW 2 (first and second moments).

The activations of the registry's MLP (``deep``: ``depth`` linear layers of ``width`` features,
ReLU between them; :func:`hpclab.train.make_model`), for a batch of ``B`` samples: autograd keeps
each ReLU's output (it is also the next layer's input), ``B x width`` per hidden layer, and the
loss keeps its log-probabilities ``B x classes`` (fp32). Under autocast the kept outputs are half
(2 bytes), and the half copies of the input and of the weights are kept too.

The peak is the most bytes alive at once. A walk through backward, layer by layer from the last,
finds it: the weights and the optimizer state, the gradients of the layers done, the activations
of the layers still to do, and the layer's own gradients in flight (the gradient arriving at its
output, and the one it passes down before and after the ReLU). The update then needs the
gradients plus the optimizer's temporaries (PyTorch's Adam on CPU works tensor by tensor with two
temporaries the size of the tensor; SGD works in place). With activation checkpointing in
segments of ``k`` blocks, forward keeps only each segment's input, and backward recomputes one
segment at a time (Chen et al. 2016: O(L/k + k) activations, least at k ~ sqrt(L)). Each
checkpointed segment also keeps a copy of the random generator's state (PyTorch's
``preserve_rng_state``, so that dropout recomputes the same mask): 5056 bytes on a CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

STATES = {"sgd": 0, "sgd-momentum": 1, "adam": 2, "adamw": 2}
ELEMENT = {"fp32": 4, "bf16": 2, "fp16": 2}
PRECISIONS = ("fp32", "mixed", "autocast")


def bytes_per_param(optimizer: str, precision: str = "fp32") -> int:
    """The table in the module docstring: bytes per parameter (weights, gradients, states)."""
    if optimizer not in STATES:
        raise ValueError(f"optimizer={optimizer!r} is not known; allowed: {', '.join(STATES)}")
    states = 4 * STATES[optimizer]
    if precision == "fp32":
        return 4 + 4 + states
    if precision == "mixed":
        return 2 + 2 + 4 + states
    if precision == "autocast":
        return 4 + 4 + states + 2
    raise ValueError(f"precision={precision!r} is not known; allowed: {', '.join(PRECISIONS)}")


@dataclass(frozen=True)
class MLP:
    """The registry's ``deep`` model and a batch: what the byte model needs to know."""

    in_features: int
    width: int
    depth: int
    batch: int
    classes: int = 10

    def layers(self) -> list[tuple[int, int]]:
        """(in, out) features of each linear layer, first to last."""
        sizes = [self.in_features] + [self.width] * (self.depth - 1) + [self.classes]
        return list(zip(sizes, sizes[1:], strict=False))

    def layer_params(self) -> list[int]:
        return [i * o + o for i, o in self.layers()]

    @property
    def params(self) -> int:
        return sum(self.layer_params())


def parts(m: MLP, optimizer: str = "sgd", dtype: str = "fp32") -> dict[str, int]:
    """Bytes of the parameters, gradients, optimizer state and activations of one step (the
    parts :func:`hpclab.memory.probe.anatomy` measures)."""
    p = m.params
    return {
        "params": 4 * p,
        "grads": 4 * p,
        "optimizer": 4 * STATES[optimizer] * p,
        "activations": sum(_kept(m, dtype)) + _head(m) + _casts(m, dtype),
    }


def _kept(m: MLP, dtype: str) -> list[int]:
    """Bytes each layer's backward needs from forward: the ReLU output it takes as input
    (none for the first layer in fp32: the batch itself is the input; its half copy under
    autocast)."""
    e = ELEMENT[dtype]
    first = e * m.batch * m.in_features if dtype != "fp32" else 0
    return [first] + [e * m.batch * i for i, _ in m.layers()[1:]]


def _head(m: MLP) -> int:
    return 4 * m.batch * m.classes  # the loss keeps fp32 log-probabilities


def _casts(m: MLP, dtype: str) -> int:
    return 0 if dtype == "fp32" else 2 * m.params  # autocast's half copies of the weights


def segments(depth: int, every: int) -> list[int]:
    """The first layer (0-based) of each checkpointed segment of ``every`` blocks."""
    if not 1 <= every <= depth:
        raise ValueError(f"checkpoint_every={every} for {depth} blocks; allowed: 1..{depth}")
    return list(range(0, depth, every))


def checkpointed_activations(m: MLP, every: int | None) -> int:
    """Bytes forward keeps with checkpointing in segments of ``every`` blocks (fp32): each
    segment's input but the first's (the batch), and the loss's; ``None``: no checkpointing."""
    kept = _kept(m, "fp32")
    if every is None:
        return sum(kept) + _head(m)
    starts = segments(m.depth, every)
    return sum(kept[s] for s in starts) + _head(m) + len(starts) * rng_state_bytes()


def rng_state_bytes() -> int:
    """Bytes of the CPU random generator's state, which each checkpointed segment keeps."""
    import torch

    return torch.get_rng_state().numel()


def peak(m: MLP, optimizer: str = "sgd", dtype: str = "fp32", every: int | None = None) -> int:
    """The most bytes alive at once in a step (see the module docstring): the larger of the
    backward walk's peak and the update's."""
    base = 4 * m.params * (1 + STATES[optimizer])  # weights and optimizer state, always alive
    grads = [4 * p for p in m.layer_params()]
    kept, e = _kept(m, dtype), ELEMENT[dtype]
    starts = segments(m.depth, every) if every is not None else [0]
    walk = 0
    for i in reversed(range(m.depth)):
        start = max(s for s in starts if s <= i)  # the segment layer i belongs to
        if every is None:
            alive = sum(kept[: i + 1])
        else:  # earlier segments' inputs and generator states, this segment recomputed
            earlier = [s for s in starts if s < start]
            alive = sum(kept[s] for s in earlier) + sum(kept[start : i + 1])
            alive += (len(earlier) + 1) * rng_state_bytes()
        n_in, n_out = m.layers()[i]
        flight = e * m.batch * (n_out + (2 * n_in if i > 0 else 0))
        casts = 2 * sum(m.layer_params()[: i + 1]) if dtype != "fp32" else 0
        walk = max(walk, sum(grads[i:]) + alive + flight + casts + (_head(m) if i == 0 else 0))
    temporaries = 2 * 4 * max(m.layer_params()) if STATES[optimizer] == 2 else 0
    return base + max(walk, sum(grads) + temporaries)


def step_bytes_for(
    params: int, optimizer: str, precision: str, activations: int
) -> dict[str, float]:
    """A whole model's bytes by part from its parameter count and its activation bytes: the
    planner's sum (chapter 06 part 2's strategy model, chapter 09's exercise)."""
    total = bytes_per_param(optimizer, precision) * params
    return {"states": float(total), "activations": float(activations),
            "total": float(total + activations)}  # fmt: skip


def sqrt_segments(depth: int) -> int:
    """Chen et al. 2016's choice: segments of about sqrt(depth) blocks."""
    return max(1, round(math.sqrt(depth)))
