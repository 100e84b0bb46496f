"""Chapter 05's checks accept the solutions and reject plausible wrong answers with advice."""

from __future__ import annotations

import pytest
import torch

from hpclab.check import sgd as check
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


def test_hogwild_loop_accepts_the_solution():
    assert check.hogwild_loop(solution).passed


@pytest.mark.parametrize(
    ("worker", "advice"),
    [
        (trains_a_copy, "did not change at all"),
        (only_rank_zero, "only process 0"),
        (never_zeroes, "zero the gradients"),
        ("not a function", "function itself"),
    ],
)
def test_hogwild_loop_rejects(worker, advice):
    res = check.hogwild_loop(worker)
    assert not res.passed and advice in res.message


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
    ],
)
def test_apply_gradient_rejects(fn, advice):
    res = check.apply_gradient(fn)
    assert not res.passed and advice in res.message


# --- (c) stale-synchronous rule ---------------------------------------------------------------


def test_ssp_rule_accepts_the_solution():
    assert check.ssp_rule(lambda c, t, b: c[t] - min(c) <= b).passed
    assert check.ssp_rule(lambda c, t, b: ssp_allows(c, t, b)).passed


@pytest.mark.parametrize(
    ("rule", "advice"),
    [
        (lambda c, t, b: c[t] - min(c) < b, "use <=, not <"),
        (lambda c, t, b: c[t] - max(c) <= b, "slowest trainer (min"),
        (lambda c, t, b: c[t] <= b, "not its own clock"),
        (lambda c, t, b: c[t] - min(c) <= b + 1, "expected"),
        (lambda c, t, b: True, "never blocks"),
    ],
)
def test_ssp_rule_rejects(rule, advice):
    res = check.ssp_rule(rule)
    assert not res.passed and advice in res.message
