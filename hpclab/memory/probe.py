"""Where a training step's memory goes, measured by the allocator (chapter 09).

The probe builds a model from the registry and trains two steps of the engine's one step
(:func:`hpclab.train.train_step`) under ``torch.profiler`` with ``profile_memory=True``: the
profiler records every allocation and free the allocator makes, with its size, so the live bytes
are known at every moment. Marks set by hooks (forward starts, forward ends, backward ends, the
update ends) cut the timeline into phases, and each part of the anatomy is the change of the live
bytes across one phase:

    parameters   building the model
    optimizer    the first update (PyTorch creates the optimizer's state lazily, at step 1)
    activations  step 2's forward (what forward keeps for backward, and any cast copies)
    gradients    step 2's forward + backward (activations are freed by then, gradients remain)
    peak         the most bytes alive at any moment of step 2, all parts together

None of these counts the tensors' sizes (numel x element size): what the allocator handed out
is measured, so a model of the bytes (:mod:`hpclab.memory.model`) can be checked against it. On
a GPU the same marks read the CUDA caching allocator's counters of the bytes the program asked
for (:func:`cuda_bytes`): ``memory_allocated`` counts the blocks it handed out, which carry up to
1 MiB of slack each (a large block is not split when less than 1 MiB would remain; an H100 run
measured gradients 3.5 % above their size that way).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

MARKS = ("start", "built", "forward", "forwarded", "backward", "updated")


@dataclass
class Timeline:
    """Live bytes at each mark (``mark@step``) and the most live between a mark and the next."""

    at: dict[str, int] = field(default_factory=dict)
    peak_after: dict[str, int] = field(default_factory=dict)

    def delta(self, a: str, b: str) -> int:
        return self.at[b] - self.at[a]

    def peak_between(self, a: str, b: str) -> int:
        names = list(self.at)
        inside = names[names.index(a) : names.index(b)]
        return max(self.peak_after[n] for n in inside)


def _mark(name: str) -> None:
    with torch.profiler.record_function(f"mark:{name}"):
        pass


def _timeline(prof: Any) -> Timeline:
    """Replays the profiler's allocation events in time order between the marks."""
    from torch._C._profiler import _EventType

    items: list[tuple[int, int, int, str]] = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        stack.extend(event.children)
        if event.tag == _EventType.Allocation:
            if event.extra_fields.device.type == "cpu":
                items.append((event.start_time_ns, 1, event.extra_fields.alloc_size, ""))
        elif event.name.startswith("mark:"):
            items.append((event.start_time_ns, 0, 0, event.name[5:]))
    items.sort(key=lambda r: (r[0], r[1]))
    out, live, current = Timeline(), 0, None
    for _, kind, size, name in items:
        if kind == 0:
            out.at[name] = out.peak_after[name] = live
            current = name
        else:
            live += size
            if current is not None:
                out.peak_after[current] = max(out.peak_after[current], live)
    return out


def cuda_bytes(device: Any = None, peak: bool = False) -> int:
    """The bytes of live tensors on a GPU as the program requested them (the caching allocator's
    ``requested_bytes`` statistic; ``peak``: the most since the last ``reset_peak_memory_stats``),
    not rounded up to the blocks it handed out (``memory_allocated``; used where the statistic is
    missing)."""
    key = "requested_bytes.all." + ("peak" if peak else "current")
    got = torch.cuda.memory_stats(device).get(key)
    if got is not None:
        return int(got)
    return (torch.cuda.max_memory_allocated if peak else torch.cuda.memory_allocated)(device)


def _cuda_timeline(run) -> Timeline:
    """The same marks on a GPU, read from the CUDA caching allocator's counters."""
    out = Timeline()

    def mark(name: str) -> None:
        torch.cuda.synchronize()
        if out.at:
            out.peak_after[list(out.at)[-1]] = cuda_bytes(peak=True)
        out.at[name] = cuda_bytes()
        torch.cuda.reset_peak_memory_stats()

    run(mark)
    mark("end")
    return out


def step_timeline(
    build,
    optimizer_fn,
    x: torch.Tensor,
    y: torch.Tensor,
    *,
    dtype: str = "fp32",
    steps: int = 2,
) -> Timeline:
    """Build a model (``build()``), train ``steps`` steps on ``(x, y)`` with the engine's step
    in ``dtype``, and return the allocator's timeline (marks ``mark@k`` for step ``k``)."""
    from hpclab.train import grad_scaler, train_step

    device = x.device.type

    def run(mark) -> None:
        mark("start")
        model = build().to(x.device)
        mark("built")
        opt = optimizer_fn(model.parameters())
        scaler = grad_scaler(device, dtype)
        k = [0]
        model.register_forward_pre_hook(lambda *_: mark(f"forward@{k[0]}"))
        model.register_forward_hook(lambda *_: mark(f"forwarded@{k[0]}"))
        for k[0] in range(1, steps + 1):
            after = lambda _: mark(f"backward@{k[0]}")  # noqa: E731
            train_step(model, opt, x, y, dtype=dtype, scaler=scaler, after_backward=after)
            mark(f"updated@{k[0]}")

    if device == "cuda":
        return _cuda_timeline(run)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        run(_mark)
    with contextlib.suppress(Exception):
        prof.profiler = prof.profiler  # keep the results alive while they are read
    return _timeline(prof)


def anatomy(t: Timeline, step: int = 2) -> dict[str, int]:
    """Bytes per part, measured (see the module docstring), from a :func:`step_timeline`."""
    s = step
    return {
        "params": t.delta("start", "built"),
        "optimizer": t.delta("backward@1", "updated@1"),
        "activations": t.delta(f"forward@{s}", f"forwarded@{s}"),
        "grads": t.delta(f"forward@{s}", f"backward@{s}"),
        "peak": t.peak_between(f"updated@{s - 1}", f"updated@{s}") - t.at["start"],
    }


def count_module(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
