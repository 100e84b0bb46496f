"""Chapter 05: a parameter server on ``torch.distributed`` point-to-point, and all-reduce.

Ranks ``0..servers-1`` are servers, each owning a contiguous shard of the flat parameter
vector; ranks ``servers..servers+trainers-1`` are trainers. A trainer pulls every shard, computes
a gradient on its own minibatch, pushes each shard's slice to its server and gets the new shard
back (push and pull in one round trip). Modes:

- ``sync``: a server waits for every trainer's gradient, applies their mean once, answers all
  (TensorFlow's central-storage strategy, Guan 2019). Equals serial SGD on the combined batch.
- ``async``: each push is applied at once (Downpour SGD, Nakayama 2017); gradients are stale.
- ``ssp``: async, but a trainer more than ``bound`` pushes ahead of the slowest waits.
- ``allreduce``: no server; trainers average gradients with ``all_reduce`` and each applies the
  same update (the mirrored strategy, Guan 2019; DDP in chapter 06).

Why point-to-point and not ``torch.distributed.rpc``: RPC prints a deprecation warning from
torch itself, its upstream parameter-server example breaks with more than one trainer, and its
shutdown can hang when a trainer dies; ``send``/``recv`` with ``src=None`` (receive from any
rank) is all a server loop needs, and the launcher can kill it cleanly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from hpclab.dist import RankContext
from hpclab.sgd.problems import Problem, Sampler, grad_at
from hpclab.sgd.staleness import ParameterShard, apply_gradient, ssp_allows
from hpclab.train import flat_params, set_flat_params

MODES = ("sync", "async", "ssp", "allreduce")
PUSH, PULL, STOP = 1.0, 2.0, 3.0
HEADER = 2  # [op, version] in front of every trainer -> server message


@dataclass
class Plan:
    """Everything every rank needs (inherited through fork, pickled for forkserver)."""

    problem: Problem
    mode: str
    servers: int
    trainers: int
    steps: int  # per trainer
    batch: int
    lr: float
    seed: int
    bound: int
    init: torch.Tensor  # flat initial parameters [P]
    fail_step: int = 0  # >0: the first trainer raises at this step (reliability demo)
    log_every: int = 5

    def bounds(self) -> list[tuple[int, int]]:
        """[lo, hi) of each server's shard of the flat parameter vector."""
        n, k = len(self.init), self.servers
        edges = [n * s // k for s in range(k + 1)]
        return list(zip(edges[:-1], edges[1:], strict=True))


def ps_worker(ctx: RankContext, plan: Plan) -> dict[str, Any]:
    """The launcher's entry point: a server, a trainer, or an all-reduce trainer."""
    if plan.mode == "allreduce":
        return _allreduce_trainer(ctx, plan)
    if ctx.rank < plan.servers:
        return _server(ctx, plan)
    return _trainer(ctx, plan)


def _warm_up(problem: Problem, model: torch.nn.Module, sampler: Sampler) -> None:
    """A few untimed gradients: the first ones pay for allocation and autograd set-up."""
    for _ in range(3):
        grad_at(problem, model, sampler.next())


# --- server -------------------------------------------------------------------------------


def _server(ctx: RankContext, plan: Plan) -> dict[str, Any]:
    import torch.distributed as dist

    lo, hi = plan.bounds()[ctx.rank]
    server = _Server(plan, ParameterShard(plan.init[lo:hi].clone(), plan.lr))
    buf = torch.empty(HEADER + hi - lo)
    blocked_s = 0.0
    total_updates = plan.steps * plan.trainers
    dist.barrier()
    start = time.monotonic()
    while len(server.finished) < plan.trainers:
        t0 = time.monotonic()
        src = dist.recv(buf)  # from any trainer
        blocked_s += time.monotonic() - t0
        op, version, payload = float(buf[0]), int(buf[1]), buf[HEADER:]
        if op == PULL:
            server.answer(src)
        elif op == STOP:
            server.finished.add(src - plan.servers)
        else:
            server.push(src, version, payload)
        if plan.mode == "ssp" and server.waiting:
            server.release()  # a push or a STOP may let held-back trainers go on
        shard = server.shard
        if ctx.rank == 0 and shard.version % 20 == 0 and op == PUSH:
            done = shard.version * (plan.trainers if plan.mode == "sync" else 1)
            ctx.progress(done, total_updates, f"server 0: version {shard.version}")
    wall = time.monotonic() - start
    return {
        "role": "server",
        "params": server.shard.params,
        "version": server.shard.version,
        "staleness": server.shard.staleness,
        "wall_s": wall,
        "busy_s": wall - blocked_s,
        "start": start,
    }


class _Server:
    """One server's state between messages: its shard, each trainer's pushes (its clock, for
    SSP), the trainers that sent STOP, and those whose reply is held back (SSP) or pending
    (sync). Trainers are named by rank in messages and by index (rank - servers) in clocks."""

    def __init__(self, plan: Plan, shard: ParameterShard) -> None:
        self.plan, self.shard = plan, shard
        self.reply = torch.empty(1 + len(shard.params))
        self.clocks = [0] * plan.trainers
        self.finished: set[int] = set()
        self.waiting: list[int] = []
        self.grad_sum = torch.zeros(len(shard.params))

    def answer(self, rank: int) -> None:
        import torch.distributed as dist

        self.reply[0] = self.shard.version
        self.reply[1:] = self.shard.params
        dist.send(self.reply, dst=rank)

    def push(self, src: int, version: int, grad: torch.Tensor) -> None:
        """A trainer's gradient for this shard, pulled at ``version``."""
        plan, t = self.plan, src - self.plan.servers
        if plan.mode == "sync":
            # Every trainer pulled the same version; the mean of the gradients is one update.
            if version != self.shard.version:
                raise RuntimeError(
                    f"sync: trainer {t} pushed version {version} at {self.shard.version}"
                )
            self.grad_sum += grad
            self.waiting.append(src)
            if len(self.waiting) == plan.trainers:
                self.shard.staleness.extend([0] * (plan.trainers - 1))
                apply_gradient(self.shard, self.grad_sum / plan.trainers, version)
                self.grad_sum.zero_()
                for r in self.waiting:
                    self.answer(r)
                self.waiting.clear()
            return
        apply_gradient(self.shard, grad, version)
        self.clocks[t] += 1
        if plan.mode == "async" or ssp_allows(self.clocks, t, plan.bound, self.finished):
            self.answer(src)
        else:
            self.waiting.append(src)

    def release(self) -> None:
        """SSP: answer the held-back trainers that are no longer too far ahead."""
        for r in list(self.waiting):
            if ssp_allows(self.clocks, r - self.plan.servers, self.plan.bound, self.finished):
                self.waiting.remove(r)
                self.answer(r)


# --- trainers -----------------------------------------------------------------------------


def _trainer(ctx: RankContext, plan: Plan) -> dict[str, Any]:
    import torch.distributed as dist

    t = ctx.rank - plan.servers
    problem = plan.problem
    model = problem.model()
    sampler = Sampler(problem.n_train, plan.batch, plan.seed, t)
    _warm_up(problem, model, Sampler(problem.n_train, plan.batch, plan.seed + 1, t))
    bounds = plan.bounds()
    versions = [0] * plan.servers
    msgs = [torch.zeros(HEADER + hi - lo) for lo, hi in bounds]
    replies = [torch.empty(1 + hi - lo) for lo, hi in bounds]
    flat = plan.init.clone()

    def exchange(op: float, grad: torch.Tensor | None) -> None:
        """Send ``op`` (with the gradient's slices) to every server and, unless STOP, wait for
        the new shards. Receives are posted first so no server ever blocks on our send."""
        reqs = []
        for s, (lo, hi) in enumerate(bounds):
            if op != STOP:
                reqs.append(dist.irecv(replies[s], src=s))
            msgs[s][0], msgs[s][1] = op, versions[s]
            if grad is not None:
                msgs[s][HEADER:] = grad[lo:hi]
            reqs.append(dist.isend(msgs[s], dst=s))
        for r in reqs:
            r.wait()
        if op == STOP:
            return
        for s, (lo, hi) in enumerate(bounds):
            versions[s] = int(replies[s][0])
            flat[lo:hi] = replies[s][1:]
        set_flat_params(model, flat)

    dist.barrier()
    start = time.monotonic()
    exchange(PULL, None)
    ema, curve = None, []
    for step in range(1, plan.steps + 1):
        if plan.fail_step and t == 0 and step == plan.fail_step:
            raise RuntimeError(f"trainer 0 (rank {ctx.rank}) fails at step {step}, as asked")
        loss, grad = grad_at(problem, model, sampler.next())
        exchange(PUSH, grad)
        ema = loss if ema is None else 0.9 * ema + 0.1 * loss
        if step % plan.log_every == 0 or step == plan.steps:
            curve.append((time.monotonic() - start, versions[0], ema))
    end = time.monotonic()
    exchange(STOP, None)
    return {"role": "trainer", "start": start, "end": end, "curve": curve}


def _allreduce_trainer(ctx: RankContext, plan: Plan) -> dict[str, Any]:
    import torch.distributed as dist

    problem = plan.problem
    model = problem.model()
    set_flat_params(model, plan.init)
    sampler = Sampler(problem.n_train, plan.batch, plan.seed, ctx.rank)
    _warm_up(problem, model, Sampler(problem.n_train, plan.batch, plan.seed + 1, ctx.rank))
    flat = plan.init.clone()
    dist.barrier()
    start = time.monotonic()
    ema, curve = None, []
    for step in range(1, plan.steps + 1):
        if plan.fail_step and ctx.rank == 0 and step == plan.fail_step:
            raise RuntimeError(f"trainer 0 (rank {ctx.rank}) fails at step {step}, as asked")
        loss, grad = grad_at(problem, model, sampler.next())
        dist.all_reduce(grad)  # sum over trainers; every rank then applies the same mean
        flat.add_(grad, alpha=-plan.lr / ctx.world_size)
        set_flat_params(model, flat)
        ema = loss if ema is None else 0.9 * ema + 0.1 * loss
        if step % plan.log_every == 0 or step == plan.steps:
            curve.append((time.monotonic() - start, step, ema))
        if ctx.rank == 0 and step % 20 == 0:
            ctx.progress(step, plan.steps, f"all-reduce step {step}")
    end = time.monotonic()
    out = {"role": "trainer", "start": start, "end": end, "curve": curve}
    if ctx.rank == 0:
        out["params"] = flat
    return out


def train_paramserver(plan: Plan, progress: Any = None, timeout_s: float = 60.0) -> list[dict]:
    """Launch servers and trainers (gloo, point-to-point) and return every rank's output."""
    from hpclab.dist import launch, start_method

    world = plan.trainers if plan.mode == "allreduce" else plan.servers + plan.trainers
    method = start_method(ps_worker)  # fork only where it is safe (chapter 05)
    if method == "fork":
        # One gradient in the parent first: forked ranks inherit the lazily imported modules.
        _warm_up(plan.problem, plan.problem.model(), Sampler(plan.problem.n_train, 2, 0, 0))
    return launch(
        ps_worker,
        world,
        args=(plan,),
        backend="gloo",
        device="cpu",
        timeout_s=timeout_s,
        threads_per_rank=1,
        start_method=method,
        progress=progress,
    )


def final_params(plan: Plan, outs: list[dict]) -> torch.Tensor:
    """The trained flat parameters: the servers' shards in order (or all-reduce rank 0's)."""
    if plan.mode == "allreduce":
        return outs[0]["params"]
    return torch.cat([outs[s]["params"] for s in range(plan.servers)])


def trained_model(plan: Plan, outs: list[dict]) -> torch.nn.Module:
    model = plan.problem.model()
    set_flat_params(model, final_params(plan, outs))
    return model


def initial_params(problem: Problem) -> torch.Tensor:
    return flat_params(problem.model())
