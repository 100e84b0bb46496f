"""Chapter 06 checks accept the solutions and reject plausible wrong answers with advice."""

from __future__ import annotations

import pytest
import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from hpclab.check import cost_model
from hpclab.check import ddp as check
from hpclab.ddp import serial_loop as ex
from hpclab.ddp.ring import ring_allreduce
from hpclab.train import train_step


def _train(
    ctx, steps, per_rank_batch, seed, *, replicas=None, batch=None, wrap=True, set_epoch=True
):
    """The solution, or a slip: ``replicas`` the sampler's num_replicas (1: all data everywhere;
    default the world size), ``batch`` the loader's batch (default per_rank_batch)."""
    data = ex.exercise_data(seed)
    model = ex.exercise_model(seed)
    replicas = ctx.world_size if replicas is None else replicas
    smp = DistributedSampler(data, num_replicas=replicas, rank=ctx.rank % replicas, seed=seed)
    loader = DataLoader(data, batch_size=batch or per_rank_batch, sampler=smp)
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
    return _train(ctx, steps, per_rank_batch, seed, replicas=1)


def no_wrap(ctx, steps, per_rank_batch, seed):
    return _train(ctx, steps, per_rank_batch, seed, wrap=False)


def no_set_epoch(ctx, steps, per_rank_batch, seed):
    return _train(ctx, steps, per_rank_batch, seed, set_epoch=False)


def global_batch_everywhere(ctx, steps, per_rank_batch, seed):
    """Every rank loads the whole global batch (world_size x per_rank_batch): DDP averages n
    equal gradients, so the weights are right, and each rank did one process's whole work."""
    return _train(
        ctx, steps, per_rank_batch, seed, replicas=1, batch=per_rank_batch * ctx.world_size
    )


def two_replicas(ctx, steps, per_rank_batch, seed):
    """num_replicas hard-coded to the notebook's 2 ranks: right only in the default case."""
    return _train(ctx, steps, per_rank_batch, seed, replicas=2)


def not_done(ctx, steps, per_rank_batch, seed):
    raise NotImplementedError("write your code here")


def test_ddp_training_accepts_solution_and_names_mistakes():
    ok = check.ddp_training(solution)
    assert ok.passed, ok.message
    assert "same weights as one process with batch 32 and 64" in ok.message
    r = check.ddp_training(two_replicas)
    assert not r.passed and "on 4 ranks the weights differ" in r.message
    r = check.ddp_training(no_sampler)
    assert not r.passed and "DistributedSampler" in r.message
    r = check.ddp_training(no_wrap)
    assert not r.passed and "DistributedDataParallel" in r.message
    r = check.ddp_training(no_set_epoch)
    assert not r.passed and "set_epoch" in r.message
    r = check.ddp_training(global_batch_everywhere)  # right weights, n times the work
    assert not r.passed and "saw 32 samples in one step" in r.message, r.message
    r = check.ddp_training(not_done)  # the stub: "not yet", without launching ranks
    assert not r.passed and "not written yet" in r.message


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


def averages(tensor, rank, world_size):
    """A unit mistake: the mean, not the sum."""
    ring_allreduce(tensor, rank, world_size)
    tensor.div_(world_size)
    return tensor


def wrong_gather_index(tensor, rank, world_size, gather_steps=None, shift=0):
    """Reduce-scatter right; the all-gather runs ``gather_steps`` steps (default n - 1) and,
    with ``shift=-1``, sends the wrong chunk at every step."""
    import torch.distributed as dist

    n = world_size
    chunks = list(tensor.view(-1).tensor_split(n))
    box = torch.empty_like(chunks[0])
    right, left = (rank + 1) % n, (rank - 1) % n
    for s in range(n - 1):
        send_i, recv_i = (rank - s) % n, (rank - s - 1) % n
        req = dist.isend(chunks[send_i].contiguous(), dst=right)
        b = box[: chunks[recv_i].numel()]
        dist.recv(b, src=left)
        req.wait()
        chunks[recv_i].add_(b)
    for s in range(n - 1 if gather_steps is None else gather_steps):
        send_i, recv_i = (rank + 1 + shift - s) % n, (rank + shift - s) % n
        req = dist.isend(chunks[send_i].contiguous(), dst=right)
        b = box[: chunks[recv_i].numel()]
        dist.recv(b, src=left)
        req.wait()
        chunks[recv_i].copy_(b)
    return tensor


def test_ring_check_accepts_solution_and_rejects_wrong_rings():
    ok = check.ring(ring_allreduce)
    assert ok.passed, ok.message
    r = check.ring(scatter_only)
    assert not r.passed and "all-gather" in r.message
    r = check.ring(returns_copy)
    assert not r.passed and "in place" in r.message and "returned the right sum" in r.message
    r = check.ring(averages)  # a unit mistake is named as one, not as chunk indices
    assert not r.passed and "average" in r.message and "chunk" not in r.message


def gather_one_step_short(tensor, rank, world_size):
    return wrong_gather_index(tensor, rank, world_size, gather_steps=world_size - 2)


def gather_wrong_chunks(tensor, rank, world_size):
    return wrong_gather_index(tensor, rank, world_size, shift=-1)


def test_ring_hints_say_what_differs():
    assert check.ring(wrong_gather_index, world_sizes=(3,)).passed  # the helper is right
    r = check.ring(gather_one_step_short, world_sizes=(3,))
    assert not r.passed and "chunks [" in r.message and "the others right" in r.message
    r = check.ring(gather_wrong_chunks, world_sizes=(3,))  # nothing specific: no false claim
    assert not r.passed and "no chunk entirely right" in r.message, r.message


def ring_calls_all_reduce(tensor, rank, world_size):
    """The right sum by the library's collective: not a ring."""
    import torch.distributed as dist

    dist.all_reduce(tensor)
    return tensor


def ring_all_gather_then_sum(tensor, rank, world_size):
    import torch.distributed as dist

    parts = [torch.empty_like(tensor) for _ in range(world_size)]
    dist.all_gather(parts, tensor)
    tensor.copy_(torch.stack(parts).sum(0))
    return tensor


def ring_whole_tensor(tensor, rank, world_size):
    """A ring that passes the whole running sum: n-1 steps of the full tensor, (n-1) x m per
    rank instead of 2(n-1)/n x m (the same traffic at n = 2, where 2(n-1)/n = 1)."""
    import torch.distributed as dist

    n = world_size
    box, travelling = torch.empty_like(tensor), tensor.clone()
    for _ in range(n - 1):
        req = dist.isend(travelling, dst=(rank + 1) % n)
        dist.recv(box, src=(rank - 1) % n)
        req.wait()
        travelling = box.clone()
        tensor.add_(travelling)
    return tensor


def ring_direct_exchange(tensor, rank, world_size):
    """Everyone sends its whole tensor to everyone: right sum, no ring."""
    import torch.distributed as dist

    reqs = [dist.isend(tensor.clone(), dst=p) for p in range(world_size) if p != rank]
    total = tensor.clone()
    for p in range(world_size):
        if p != rank:
            box = torch.empty_like(tensor)
            dist.recv(box, src=p)
            total += box
    for req in reqs:
        req.wait()
    tensor.copy_(total)
    return tensor


@pytest.mark.parametrize(
    ("fn", "hint"),
    [
        (ring_calls_all_reduce, "by calling dist.all_reduce"),
        (ring_all_gather_then_sum, "by calling dist.all_gather"),
        (ring_whole_tensor, "not the whole tensor"),
        (ring_direct_exchange, "sends only to its right neighbour"),
    ],
)
def test_ring_check_rejects_the_right_sum_reached_without_a_ring(fn, hint):
    """The sum alone cannot tell a ring: the check looks at what each rank sent, to whom."""
    r = check.ring(fn, world_sizes=(3, 4))
    assert not r.passed and hint in r.message, r.message


def test_ring_check_needs_more_than_two_ranks_to_see_a_whole_tensor_ring():
    # at 2 ranks passing the whole tensor once sends as much as a ring: why (2, 3, 4) are tried
    assert check.ring(ring_whole_tensor, world_sizes=(2,)).passed
    assert not check.ring(ring_whole_tensor).passed


# --- busbw: a function, tried beyond the notebook's 2 ranks (where busbw == algbw) ----------
M, T = 4 * 2**20, 0.01


def busbw_solution(nbytes, seconds, ranks):
    return nbytes / seconds / 1e9 * 2 * (ranks - 1) / ranks


def test_busbw_accepts_the_formula():
    ok = cost_model.busbw(busbw_solution, M, T, 2)
    assert ok.passed and "2, 3, 4 and 8 ranks" in ok.message


@pytest.mark.parametrize(
    "wrong, advice",
    [
        # right only in the default case: at n = 2 these equal busbw
        (lambda b, s, n: b / s / 1e9, "that is algbw"),
        (lambda b, s, n: b / s / 1e9 * 2 * (2 - 1) / 2, "that is algbw"),
        (lambda b, s, n: b / s / 1e9 * 2, "factor 2"),
        (lambda b, s, n: b / s / 1e9 * 2 * (n - 1), "left out the /n"),
        (lambda b, s, n: b / s / 1e9 * (n - 1) / n, "left out the 2"),
        (lambda b, s, n: b / s / 1e9 * n / (2 * (n - 1)), "divided by 2(n-1)/n"),
        (lambda b, s, n: b / s / 2**30 * 2 * (n - 1) / n, "GiB"),
        (lambda b, s, n: 8 * b / s / 1e9 * 2 * (n - 1) / n, "bits"),
        (lambda b, s, n: b / s / 1e6 * 2 * (n - 1) / n, "MB/s"),
        (lambda b, s, n: b / s / 1e9 * 2 * (n - 1) / n + 0.3, "expected"),  # nothing specific
    ],
)
def test_busbw_rejects_wrong_formulas_with_the_right_advice(wrong, advice):
    r = cost_model.busbw(wrong, M, T, 2)
    assert not r.passed and advice in r.message, r.message
    if advice == "expected":  # says what differs, claims no specific slip
        assert "for " in r.message and "ranks you return" in r.message


def test_busbw_wants_a_function_and_says_not_yet_for_the_stub():
    r = cost_model.busbw(1.5, M, T, 2)
    assert not r.passed and "function" in r.message

    def stub(nbytes, seconds, ranks):
        raise NotImplementedError("not done")

    r = cost_model.busbw(stub, M, T, 2)
    assert not r.passed and "not written yet" in r.message

    def broken(nbytes, seconds, ranks):
        raise TypeError("bad operand")

    r = cost_model.busbw(broken, M, T, 2)
    assert not r.passed and r.message.count("TypeError") == 1


# --- efficiency: a function, tried at several n and alpha --------------------------------
ARGS = (0.03, 4e6, 2, 2e-5, 1.5e9)  # like the notebook: 2 ranks, small alpha


def eff_solution(c, m, n, a, b):
    return c / (c + 2 * (n - 1) * a + 2 * (n - 1) / n * m / b)


def test_efficiency_accepts_the_model():
    ok = cost_model.efficiency_prediction(eff_solution, *ARGS)
    assert ok.passed, ok.message


@pytest.mark.parametrize(
    "wrong, advice",
    [
        # one message (alpha + m/B) equals the ring at n = 2 up to one alpha: right by default
        (lambda c, m, n, a, b: c / (c + a + m / b), "sent the message once"),
        (lambda c, m, n, a, b: 1 - eff_solution(c, m, n, a, b), "communication share"),
        (lambda c, m, n, a, b: n * eff_solution(c, m, n, a, b), "speedup"),
        (lambda c, m, n, a, b: eff_solution(c, 8 * m, n, a, b), "bytes, not bits"),
        (lambda c, m, n, a, b: c / (c + 2 * (n - 1) / n * m / b), "latency term is missing"),
        (lambda c, m, n, a, b: c / (c + a + 2 * (n - 1) / n * m / b), "not once"),
        (lambda c, m, n, a, b: c / (c + 2 * (n - 1) * (a + m / b)), "m/n bytes"),
        (lambda c, m, n, a, b: eff_solution(c, m, 2, a, b), "expected"),  # n ignored
    ],
)
def test_efficiency_rejects_wrong_models_with_the_right_advice(wrong, advice):
    r = cost_model.efficiency_prediction(wrong, *ARGS)
    assert not r.passed and advice in r.message, r.message
