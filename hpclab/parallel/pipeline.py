"""Pipeline parallelism with send/recv: stages, schedules, one training step (chapter 06, part 2).

The model is cut into ``p`` consecutive stages, one per rank ("the model is split and each
part runs on its own device", Guan 2019; Nakayama 2017). Rank r receives activations from rank
r-1, runs its stage and sends the result to rank r+1; in backward, gradients flow the other way.
The batch is cut into ``m`` micro-batches, and a *schedule* orders each rank's forward (F) and
backward (B) passes over them:

- ``naive``: the whole batch at once (m = 1): only one rank works at any time.
- ``gpipe``: all m forwards, then all m backwards (GPipe, Huang et al. 2019). With equal stage
  times each rank idles for p-1 of m+p-1 slots: the *bubble* (p-1)/(m+p-1).
- ``1f1b``: p-r-1 forwards to fill the pipe, then one forward / one backward alternating, then
  the remaining backwards (PipeDream-flush, as in Megatron-LM). Same bubble as GPipe, but a
  rank keeps at most p-r micro-batches' activations alive instead of m.

Each micro-batch's loss is divided by m, so the gradients summed over micro-batches are the
whole batch's mean-loss gradient: the stages together end exactly where one process ends.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hpclab.train import flat_params

SCHEDULES = ("naive", "gpipe", "1f1b")
ACT, GRAD = 0, 1  # message tags: activations go forward, gradients backward


def bubble_model(stages: int, micro_batches: int) -> float:
    """Idle fraction of each rank for equal stage times: (p-1)/(m+p-1) (GPipe's bubble)."""
    return (stages - 1) / (micro_batches + stages - 1)


def split_stages(model: nn.Sequential, stages: int) -> list[nn.Sequential]:
    """Cut ``model`` into ``stages`` consecutive parts with about equal numbers of layers
    (a layer = a module with parameters plus the parameter-free modules after it)."""
    units: list[list[nn.Module]] = []
    for mod in model:
        if any(True for _ in mod.parameters()) or not units:
            units.append([mod])
        else:
            units[-1].append(mod)
    if stages > len(units):
        raise ValueError(f"stages={stages} exceeds the model's {len(units)} layers")
    parts = np.array_split(np.arange(len(units)), stages)
    return [nn.Sequential(*[m for i in part for m in units[i]]) for part in parts]


def schedule(kind: str, rank: int, stages: int, micro_batches: int) -> list[tuple[str, int]]:
    """The order of ``("F", i)`` and ``("B", i)`` passes rank ``rank`` runs in one step."""
    m = 1 if kind == "naive" else micro_batches
    if kind in ("naive", "gpipe"):
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    if kind != "1f1b":
        raise ValueError(f"schedule={kind!r}; allowed: {', '.join(SCHEDULES)}")
    warm = min(stages - rank - 1, m)
    ops = [("F", i) for i in range(warm)]
    for i in range(m - warm):  # steady state: one forward, one backward
        ops += [("F", warm + i), ("B", i)]
    ops += [("B", i) for i in range(m - warm, m)]
    return ops


@dataclass
class PassCosts:
    """What the measured passes cost, per rank: the mean forward and backward pass, the gap a
    rank leaves after a pass before one that needs no input (posting the send of the pass
    before), and the mean hand-over a receiver pays (:func:`measured_costs`)."""

    forward_s: list[float]
    backward_s: list[float]
    send_s: list[float]
    message_s: float


def simulate(
    kind: str,
    stages: int,
    micro_batches: int,
    forward_s: float = 1.0,
    backward_s: float = 2.0,
    *,
    costs: PassCosts | None = None,
) -> list[list[tuple[str, int, float, float]]]:
    """The timeline a schedule gives (the *model* tier): per rank, ``(pass, micro-batch,
    start, end)``. A pass starts when its rank is free and its input is there: F(i) needs F(i)
    of the rank before, B(i) needs B(i) of the rank after. Without ``costs``: equal stages of
    ``forward_s``/``backward_s`` and free messages. With ``costs`` (the extended model): each
    rank's own pass times, every hand-over paid by its receiver (``message_s`` after the later
    of "free" and "input sent") and ``send_s`` before a pass that needs no input."""
    if costs is None:
        costs = PassCosts([forward_s] * stages, [backward_s] * stages, [0.0] * stages, 0.0)
    done: dict[tuple[str, int, int], float] = {}
    queues = [schedule(kind, r, stages, micro_batches) for r in range(stages)]
    clock, out = [0.0] * stages, [[] for _ in range(stages)]
    while any(queues):
        progressed = False
        for r in range(stages):
            while queues[r]:
                op, i = queues[r][0]
                dep = ("F", i, r - 1) if op == "F" else ("B", i, r + 1)
                if 0 <= dep[2] < stages:
                    if dep not in done:
                        break  # waits for the neighbour
                    start = max(clock[r], done[dep]) + costs.message_s
                else:
                    start = clock[r] + (costs.send_s[r] if out[r] else 0.0)
                took = (costs.forward_s if op == "F" else costs.backward_s)[r]
                clock[r] = done[(op, i, r)] = start + took
                out[r].append((op, i, start, clock[r]))
                queues[r].pop(0)
                progressed = True
        if not progressed:
            raise RuntimeError(f"schedule {kind!r} deadlocks with {stages} stages")
    return out


def extended_bubble(kind: str, micro_batches: int, costs: PassCosts) -> float:
    """The mean idle fraction the extended model gives: :func:`simulate` with ``costs``.
    Equal stages and free messages give (p-1)/(m+p-1)."""
    return float(
        np.mean(idle_fractions(simulate(kind, len(costs.forward_s), micro_batches, costs=costs)))
    )


def idle_fractions(timeline: list[list[tuple[str, int, float, float]]]) -> list[float]:
    """Per rank: 1 - busy time / the whole step's span (first start to last end, all ranks)."""
    begin = min(e[2] for events in timeline for e in events)
    span = max(e[3] for events in timeline for e in events) - begin
    return [1.0 - sum(e[3] - e[2] for e in events) / span for events in timeline]


def measured_costs(
    timeline: list[list[tuple[str, int, float, float]]], starts: list[float]
) -> PassCosts:
    """The extended model's inputs, read from one measured step. ``starts``: each rank's step
    start on a clock common to all ranks (``StepLog.t0_s``; one node's ``perf_counter``), to
    which its events' times are added. A hand-over is what the receiver paid from the moment
    it could have started (free, and the input's pass ended on its sender) to its start:
    transfer and wake-up if it waited, the receive copy if the message was already there; the
    model pays their mean on every one. ``send_s``: the mean gap before each pass that needs no
    input (not the step's first)."""
    p = len(timeline)
    ends = [
        {(op, i): t0 + b for op, i, _, b in events}
        for events, t0 in zip(timeline, starts, strict=True)
    ]
    hand: list[float] = []
    gaps: list[list[float]] = [[] for _ in range(p)]
    for r, (events, t0) in enumerate(zip(timeline, starts, strict=True)):
        for k, (op, i, a, _) in enumerate(events):
            free = events[k - 1][3] if k else 0.0
            src = r - 1 if op == "F" else r + 1
            if 0 <= src < p and (op, i) in ends[src]:
                hand.append(t0 + a - max(t0 + free, ends[src][(op, i)]))
            elif k:
                gaps[r].append(a - free)

    def mean(xs: list[float]) -> float:
        return float(np.mean(xs)) if xs else 0.0

    return PassCosts(
        forward_s=[mean([b - a for op, _, a, b in ev if op == "F"]) for ev in timeline],
        backward_s=[mean([b - a for op, _, a, b in ev if op == "B"]) for ev in timeline],
        send_s=[mean(g) for g in gaps],
        message_s=mean(hand),
    )


@dataclass
class StepLog:
    """What one rank did in one step: (kind, micro-batch, start_s, end_s) per pass, measured
    from the step's start (after a barrier), and the activation bytes it kept alive."""

    events: list[tuple[str, int, float, float]] = field(default_factory=list)
    activation_peak_bytes: int = 0
    max_in_flight: int = 0
    step_s: float = 0.0
    t0_s: float = 0.0  # the step's start on ``perf_counter`` (one clock for all ranks of a node)


class PipelineStage:
    """Rank ``rank``'s stage of a ``stages``-stage pipeline; :meth:`step` trains one batch."""

    def __init__(self, module: nn.Module, rank: int, stages: int, lr: float, device: str) -> None:
        self.module = module.to(device)
        self.rank, self.stages, self.device = rank, stages, device
        self.first, self.last = rank == 0, rank == stages - 1
        self.opt = torch.optim.SGD(self.module.parameters(), lr=lr)
        self._param_ptrs = {p.data_ptr() for p in self.module.parameters()}

    def _recv(self, shape: tuple[int, ...], src: int, tag: int) -> torch.Tensor:
        import torch.distributed as dist

        buf = torch.empty(shape, device=self.device)
        dist.recv(buf, src=src, tag=tag)
        return buf

    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize(self.device)

    def step(self, x: torch.Tensor, y: torch.Tensor, kind: str, micro_batches: int) -> StepLog:
        """One training step of this stage under schedule ``kind``; returns its log."""
        import torch.distributed as dist

        m = 1 if kind == "naive" else micro_batches
        xs, ys = x.chunk(m), y.chunk(m)
        log, sends = StepLog(), []
        inputs: dict[int, torch.Tensor] = {}
        outputs: dict[int, torch.Tensor] = {}
        held: dict[int, int] = {}  # activation bytes autograd saved, per micro-batch in flight

        def pack(t: torch.Tensor) -> torch.Tensor:
            if t.data_ptr() not in self._param_ptrs:  # activations, not weights
                held[current[0]] = held.get(current[0], 0) + t.numel() * t.element_size()
            return t

        current = [0]
        self.opt.zero_grad(set_to_none=True)
        dist.barrier()
        t0 = log.t0_s = time.perf_counter()
        for op, i in schedule(kind, self.rank, self.stages, m):
            if op == "F":
                if self.first:
                    inp = xs[i].to(self.device)
                else:
                    shape = (len(xs[i]), self.in_features)
                    inp = self._recv(shape, self.rank - 1, ACT).requires_grad_()
                start = time.perf_counter() - t0
                current[0] = i
                with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                    out = self.module(inp)
                    if self.last:
                        out = F.cross_entropy(out, ys[i].to(self.device)) / m
                self._sync()
                # the pass ends before its send: a hand-over is timed from here
                log.events.append((op, i, start, time.perf_counter() - t0))
                if not self.last:
                    sends.append(dist.isend(out.detach(), dst=self.rank + 1, tag=ACT))
                inputs[i], outputs[i] = inp, out
                log.activation_peak_bytes = max(log.activation_peak_bytes, sum(held.values()))
                log.max_in_flight = max(log.max_in_flight, len(outputs))
            else:
                if self.last:
                    start = time.perf_counter() - t0
                    outputs[i].backward()
                else:
                    grad = self._recv(tuple(outputs[i].shape), self.rank + 1, GRAD)
                    start = time.perf_counter() - t0
                    outputs[i].backward(grad)
                self._sync()
                log.events.append((op, i, start, time.perf_counter() - t0))
                if not self.first:
                    sends.append(dist.isend(inputs[i].grad, dst=self.rank - 1, tag=GRAD))
                del outputs[i]
                held.pop(i, None)
        for work in sends:
            work.wait()
        self.opt.step()
        self._sync()
        log.step_s = time.perf_counter() - t0
        return log

    @property
    def in_features(self) -> int:
        """Features arriving from the previous stage (this stage's first linear layer's input)."""
        return next(m for m in self.module if isinstance(m, nn.Linear)).in_features


def flat_stage_params(stage: PipelineStage) -> torch.Tensor:
    return flat_params(stage.module).cpu()
