"""Chapter 05's checks accept the solutions and reject plausible wrong answers with advice."""

from __future__ import annotations

import pytest
import torch

from hpclab.check import sgd as check
from hpclab.check.ssp import ssp_rule
from hpclab.sgd.staleness import ssp_allows

# --- (a) Hogwild worker loop --------------------------------------------------------------


def _loop(model, problem, steps, lr, zero=True):
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for _ in range(steps):
        idx = torch.randint(0, problem.n_train, (32,))
        if zero:
            opt.zero_grad()
        problem.loss_fn(model(problem.x_train[idx]), problem.y_train[idx]).backward()
        opt.step()


def solution(ctx, problem, model, steps, lr):
    _loop(model, problem, steps, lr)


def trains_a_copy(ctx, problem, model, steps, lr):
    _loop(problem.model(), problem, steps, lr)


def only_rank_zero(ctx, problem, model, steps, lr):
    if ctx.rank == 0:
        _loop(model, problem, steps, lr)


def never_zeroes(ctx, problem, model, steps, lr):
    _loop(model, problem, steps, lr, zero=False)


def quarter_of_the_steps(ctx, problem, model, steps, lr):
    _loop(model, problem, steps // 4, lr)


def lr_over_workers(ctx, problem, model, steps, lr):
    _loop(model, problem, steps, lr / ctx.world_size)


def steps_split_over_workers(ctx, problem, model, steps, lr):
    _loop(model, problem, steps // ctx.world_size, lr)


def stops_early(ctx, problem, model, steps, lr):
    _loop(model, problem, min(steps, 100), lr)  # right for the exact run's 12 steps


def one_fixed_minibatch(ctx, problem, model, steps, lr):
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    idx = torch.arange(32)  # the same 32 samples every step
    for _ in range(steps):
        opt.zero_grad()
        problem.loss_fn(model(problem.x_train[idx]), problem.y_train[idx]).backward()
        opt.step()


def test_hogwild_loop_accepts_the_solution():
    res = check.hogwild_loop(solution)
    assert res.passed, res.message


@pytest.mark.parametrize(
    ("worker", "advice"),
    [
        (trains_a_copy, "process 0 left its model unchanged"),
        (only_rank_zero, "process 1 left its model unchanged"),
        (never_zeroes, "zero the gradients"),
        ("not a function", "function itself"),
        # tolerances that accepted part of the work: steps and lr are now checked exactly
        (quarter_of_the_steps, "made 3 updates"),
        (steps_split_over_workers, "made 6 updates"),
        (lr_over_workers, "as if lr were 0.5 (halved)"),
        (one_fixed_minibatch, "new random minibatch"),
        (stops_early, "ran 100 backward passes for steps=300"),
    ],
)
def test_hogwild_loop_rejects(worker, advice):
    res = check.hogwild_loop(worker)
    assert not res.passed and advice in res.message, res.message


# --- (b) apply-gradient with version tracking -----------------------------------------------


def apply_ok(shard, grad, grad_version):
    staleness = shard.version - grad_version
    shard.params -= shard.lr * grad
    shard.version += 1
    return staleness


def apply_after_increment(shard, grad, grad_version):
    shard.params -= shard.lr * grad
    shard.version += 1
    return shard.version - grad_version


def apply_no_version(shard, grad, grad_version):
    shard.params -= shard.lr * grad
    return shard.version - grad_version


def apply_uphill(shard, grad, grad_version):
    staleness = shard.version - grad_version
    shard.params += shard.lr * grad
    shard.version += 1
    return staleness


def apply_reversed(shard, grad, grad_version):
    staleness = grad_version - shard.version
    shard.params -= shard.lr * grad
    shard.version += 1
    return staleness


def apply_fixed_lr(shard, grad, grad_version):
    staleness = shard.version - grad_version
    shard.params -= 0.1 * grad  # the notebook's lr, hard-coded
    shard.version += 1
    return staleness


def test_apply_gradient_accepts_the_solution():
    res = check.apply_gradient(apply_ok)
    assert res.passed and "[0, 1, 2, 2, 1, 1]" in res.message


@pytest.mark.parametrize(
    ("fn", "advice"),
    [
        (apply_after_increment, "off by one"),
        (apply_no_version, "advance shard.version"),
        (apply_uphill, "uphill"),
        (apply_reversed, "not the reverse"),
        (lambda shard, grad, v: None, "return the staleness"),
        (apply_fixed_lr, "with shard.lr=0.25"),  # right only at the default lr
    ],
)
def test_apply_gradient_rejects(fn, advice):
    res = check.apply_gradient(fn)
    assert not res.passed and advice in res.message


# --- (c) stale-synchronous rule ---------------------------------------------------------------


def test_ssp_rule_accepts_the_solution():
    assert ssp_rule(lambda c, t, b: c[t] - min(c) <= b).passed
    assert ssp_rule(lambda c, t, b: ssp_allows(c, t, b)).passed


@pytest.mark.parametrize(
    ("rule", "advice"),
    [
        (lambda c, t, b: c[t] - min(c) < b, "use <=, not <"),
        (lambda c, t, b: c[t] - max(c) <= b, "never blocks"),  # always true
        (lambda c, t, b: max(c) - c[t] <= b, "*behind* the fastest"),
        # scripted cases where the slowest trainer sat next to the one asking: now every case
        (lambda c, t, b: c[t] - c[t - 1] <= b, "neighbour"),
        (lambda c, t, b: c[t] - c[(t + 1) % len(c)] <= b, "neighbour"),
        (lambda c, t, b: c[t] - sum(c) / len(c) <= b, "mean clock"),
        (lambda c, t, b: c[t] - min(c[:2]) <= b, "cases differ"),  # only the first two
        (lambda c, t, b: c[t] <= b, "not its own clock"),
        (lambda c, t, b: c[t] - min(c) <= b + 1, "expected"),
        (lambda c, t, b: True, "never blocks"),
    ],
)
def test_ssp_rule_rejects(rule, advice):
    res = ssp_rule(rule)
    assert not res.passed and advice in res.message, res.message
    assert "min(clocks)" not in res.message  # feedback, not the answer


def test_hogwild_loop_on_a_gpu_machine_runs_no_backward_in_the_kernel(monkeypatch):
    """With a GPU visible, a process that ran a backward pass forks children that cannot run
    autograd: the check keeps its own SGD out of this process (GPU visibility patched)."""
    import os

    import hpclab.dist.placement as placement

    monkeypatch.setattr(placement, "gpu_count", lambda: 1)
    parent, here = os.getpid(), []
    for name in ("backward", "grad"):
        original = getattr(torch.autograd, name)

        def spy(*a, _original=original, **kw):
            if os.getpid() == parent:
                here.append(1)
            return _original(*a, **kw)

        monkeypatch.setattr(torch.autograd, name, spy)
    assert check.hogwild_loop(solution).passed
    res = check.hogwild_loop(lr_over_workers)  # needs the reference trajectories
    assert not res.passed and "as if lr were 0.5 (halved)" in res.message, res.message
    assert here == []
