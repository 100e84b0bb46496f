"""Chapter 06 part 2's checks accept the solutions and reject plausible wrong answers."""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributed as dist

from hpclab.check import parallel as check


def average_ok(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


def average_sum(model):  # forgets to divide
    for p in model.parameters():
        dist.all_reduce(p.grad)


def average_nothing(model):  # every rank trains on its own
    pass


def average_rank0_only(model):  # reduces to rank 0: the other ranks keep their own gradients
    for p in model.parameters():
        dist.reduce(p.grad, dst=0)
        p.grad /= dist.get_world_size()


def test_naive_averaging_accepts_the_solution():
    res = check.naive_averaging(average_ok)
    assert res.passed, res.message


@pytest.mark.parametrize(
    ("fn", "hint"),
    [
        (average_sum, "*sum* of the gradients"),
        (average_nothing, "replicas ended different"),
        (average_rank0_only, "replicas ended different"),
    ],
)
def test_naive_averaging_rejects_wrong_answers(fn, hint):
    res = check.naive_averaging(fn, world_sizes=(2,))
    assert not res.passed and hint in res.message, res.message


def test_bubble_check():
    assert check.bubble(lambda p, m: (p - 1) / (m + p - 1)).passed
    wrong = {
        "relative to the busy time": lambda p, m: (p - 1) / m,
        "naive schedule": lambda p, m: (p - 1) / p,
        "busy fraction": lambda p, m: m / (m + p - 1),
        "fills and drains": lambda p, m: (p - 1) / (m + p),
    }
    for hint, fn in wrong.items():
        res = check.bubble(fn)
        assert not res.passed and hint in res.message, (hint, res.message)
    assert "should be a number" in check.bubble(lambda p, m: None).message


def test_micro_batches_check():
    assert check.micro_batches(lambda p, t: math.ceil((p - 1) * (1 - t) / t)).passed
    loop = lambda p, t: next(m for m in range(1, 10**6) if (p - 1) / (m + p - 1) <= t)  # noqa: E731
    assert check.micro_batches(loop).passed
    res = check.micro_batches(lambda p, t: math.floor((p - 1) * (1 - t) / t))
    assert not res.passed and "round up" in res.message
    res = check.micro_batches(lambda p, t: math.ceil((p - 1) / t))  # forgot (1 - target)
    assert not res.passed and "take the least" in res.message
    res = check.micro_batches(lambda p, t: (p - 1) * (1 - t) / t)
    assert not res.passed and "whole number" in res.message


def column_ok(x, w, b):
    y = x @ w.T + b
    parts = [torch.empty_like(y) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, y)
    return torch.cat(parts, dim=-1)


def column_local(x, w, b):
    return x @ w.T + b


def column_rows(x, w, b):
    y = x @ w.T + b
    parts = [torch.empty_like(y) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, y)
    return torch.cat(parts, dim=0)


def column_no_bias(x, w, b):
    return column_ok(x, w, torch.zeros_like(b))


def column_reversed(x, w, b):
    y = x @ w.T + b
    parts = [torch.empty_like(y) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, y)
    return torch.cat(parts[::-1], dim=-1)


def test_column_forward_accepts_the_solution():
    res = check.column_forward(column_ok)
    assert res.passed, res.message


@pytest.mark.parametrize(
    ("fn", "hint"),
    [
        (column_local, "this rank's slice only"),
        (column_rows, "concatenate along the last dim"),
        (column_no_bias, "lacks the bias"),
        (column_reversed, "wrong order"),
    ],
)
def test_column_forward_rejects_wrong_answers(fn, hint):
    res = check.column_forward(fn, world_sizes=(2,))
    assert not res.passed and hint in res.message, res.message
