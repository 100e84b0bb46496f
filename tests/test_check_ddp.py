"""Chapter 06 checks accept the solutions and reject plausible wrong answers with advice."""

from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from hpclab.check import ddp as check
from hpclab.ddp import serial_loop as ex
from hpclab.ddp.ring import ring_allreduce
from hpclab.train import train_step


def _train(ctx, steps, per_rank_batch, seed, *, sampler=True, wrap=True, set_epoch=True):
    data = ex.exercise_data(seed)
    model = ex.exercise_model(seed)
    if sampler:
        smp = DistributedSampler(data, num_replicas=ctx.world_size, rank=ctx.rank, seed=seed)
    else:
        smp = DistributedSampler(data, num_replicas=1, rank=0, seed=seed)  # all data everywhere
    loader = DataLoader(data, batch_size=per_rank_batch, sampler=smp)
    net = DDP(model) if wrap else model
    opt = torch.optim.SGD(net.parameters(), lr=ex.LR)
    done, epoch = 0, 0
    while done < steps:
        if set_epoch:
            smp.set_epoch(epoch)
        for x, y in loader:
            if done == steps:
                break
            train_step(net, opt, x, y)
            done += 1
        epoch += 1
    return torch.nn.utils.parameters_to_vector(model.parameters()).detach()


def solution(ctx, steps, per_rank_batch, seed):
    return _train(ctx, steps, per_rank_batch, seed)


def no_sampler(ctx, steps, per_rank_batch, seed):
    return _train(ctx, steps, per_rank_batch, seed, sampler=False)


def no_wrap(ctx, steps, per_rank_batch, seed):
    return _train(ctx, steps, per_rank_batch, seed, wrap=False)


def no_set_epoch(ctx, steps, per_rank_batch, seed):
    return _train(ctx, steps, per_rank_batch, seed, set_epoch=False)


def not_done(ctx, steps, per_rank_batch, seed):
    raise NotImplementedError("write your code here")


def test_ddp_training_accepts_solution_and_names_mistakes():
    ok = check.ddp_training(solution)
    assert ok.passed, ok.message
    assert "same weights as one process with batch 32" in ok.message
    r = check.ddp_training(no_sampler)
    assert not r.passed and "DistributedSampler" in r.message
    r = check.ddp_training(no_wrap)
    assert not r.passed and "DistributedDataParallel" in r.message
    r = check.ddp_training(no_set_epoch)
    assert not r.passed and "set_epoch" in r.message
    r = check.ddp_training(not_done)
    assert not r.passed and "NotImplementedError" in r.message


def scatter_only(tensor, rank, world_size):
    """The reduce-scatter half of the ring only."""
    import torch.distributed as dist

    chunks = list(tensor.view(-1).tensor_split(world_size))
    box = torch.empty_like(chunks[0])
    for s in range(world_size - 1):
        send_i, recv_i = (rank - s) % world_size, (rank - s - 1) % world_size
        req = dist.isend(chunks[send_i].contiguous(), dst=(rank + 1) % world_size)
        b = box[: chunks[recv_i].numel()]
        dist.recv(b, src=(rank - 1) % world_size)
        req.wait()
        chunks[recv_i].add_(b)
    return tensor


def returns_copy(tensor, rank, world_size):
    out = tensor.clone()
    ring_allreduce(out, rank, world_size)
    return out  # the caller's tensor is untouched


def test_ring_check_accepts_solution_and_rejects_wrong_rings():
    ok = check.ring(ring_allreduce)
    assert ok.passed, ok.message
    r = check.ring(scatter_only)
    assert not r.passed and "all-gather" in r.message
    r = check.ring(returns_copy)
    assert not r.passed and "in place" in r.message


def test_busbw_check():
    m, t, n = 64 * 2**20, 0.05, 4
    algbw = m / t / 1e9
    assert check.busbw(algbw * 1.5, m, t, n).passed
    r = check.busbw(algbw, m, t, n)
    assert not r.passed and "2(n-1)/n" in r.message
    r = check.busbw(algbw * 2, m, t, n)
    assert not r.passed and "factor 2" in r.message
    r = check.busbw(m / t / 2**30 * 1.5, m, t, n)
    assert not r.passed and "GiB" in r.message
    r = check.busbw(algbw * 1.5 * 8, m, t, n)
    assert not r.passed and "bits" in r.message
    assert not check.busbw("fast", m, t, n).passed


def test_efficiency_prediction_check():
    args = dict(compute_s=0.01, nbytes=4e6, ranks=4, alpha_s=1e-4, bandwidth_bps=1e9)
    comm = 2 * 3 * 1e-4 + 2 * 3 / 4 * 4e6 / 1e9  # 0.0066 s
    good = 0.01 / (0.01 + comm)
    assert check.efficiency_prediction(good, **args).passed
    r = check.efficiency_prediction(0.01 / (0.01 + 1e-4 + 4e6 / 1e9), **args)
    assert not r.passed and "2(n-1) steps" in r.message
    r = check.efficiency_prediction(comm / (0.01 + comm), **args)
    assert not r.passed and "communication share" in r.message
    r = check.efficiency_prediction(4 * good, **args)
    assert not r.passed and "speedup" in r.message
