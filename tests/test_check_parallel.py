"""Chapter 06 part 2's checks accept the solutions and reject plausible wrong answers."""

from __future__ import annotations

import math
from fractions import Fraction

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


def micro_exact(p, t):
    return math.ceil((p - 1) * (1 - Fraction(str(t))) / Fraction(str(t)))


def test_micro_batches_check_accepts_exact_answers():
    assert check.micro_batches(micro_exact).passed
    loop = lambda p, t: next(m for m in range(1, 10**6) if (p - 1) / (m + p - 1) <= t)  # noqa: E731
    assert check.micro_batches(loop).passed  # the definition itself, searched


@pytest.mark.parametrize(
    ("fn", "hint"),
    [
        (lambda p, t: math.floor((p - 1) * (1 - t) / t), "round up"),
        (lambda p, t: math.ceil((p - 1) / t), "take the least"),  # forgot (1 - target)
        (lambda p, t: (p - 1) * (1 - t) / t, "whole number"),
        # whole quotients: a bubble equal to the target is allowed
        (lambda p, t: int((p - 1) * (1 - t) / t) + 1, "floor + 1, or a strict <"),
        (
            lambda p, t: next(m for m in range(1, 10**6) if (p - 1) / (m + p - 1) < t),
            "floor + 1, or a strict <",
        ),
        # the float ceiling: right on every case but those whole in decimal, not in binary
        (lambda p, t: math.ceil((p - 1) * (1 - t) / t), "lands a hair above"),
        (lambda p, t: 1 / 0, "raised ZeroDivisionError"),
    ],
)
def test_micro_batches_check_rejects_wrong_answers(fn, hint):
    res = check.micro_batches(fn)
    assert not res.passed and hint in res.message, res.message


def test_micro_batches_cases_separate_the_float_ceiling_from_the_exact_count():
    # (4, 0.2): 3 x 0.8 / 0.2 is 12 exactly, 12.000000000000002 in floats
    assert check.least_micro_batches(4, 0.2) == 12
    assert math.ceil(3 * (1 - 0.2) / 0.2) == 13
    assert all(check.least_micro_batches(p, t) == micro_exact(p, t) for p, t in check.MICRO_CASES)


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


def column_gather_weights(x, w, b):
    """Gathers the whole layer, then runs it: the right output, and no memory saved."""
    n = dist.get_world_size()
    ws, bs = [torch.empty_like(w) for _ in range(n)], [torch.empty_like(b) for _ in range(n)]
    dist.all_gather(ws, w)
    dist.all_gather(bs, b)
    return x @ torch.cat(ws).T + torch.cat(bs)


def column_gather_weight_into_tensor(x, w, b):
    n = dist.get_world_size()
    full_w = torch.empty(n * w.shape[0], w.shape[1])
    dist.all_gather_into_tensor(full_w, w.contiguous())
    full_b = torch.empty(n * b.shape[0])
    dist.all_gather_into_tensor(full_b, b.contiguous())
    return x @ full_w.T + full_b


def column_padded_all_reduce(x, w, b):
    """Each rank writes its slice into a zero output and all-reduces it: right, p x the traffic."""
    y = x @ w.T + b
    n, r = dist.get_world_size(), dist.get_rank()
    full = torch.zeros(x.shape[0], y.shape[1] * n)
    full[:, r * y.shape[1] : (r + 1) * y.shape[1]] = y
    dist.all_reduce(full)
    return full


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


@pytest.mark.parametrize(
    ("fn", "hint"),
    [
        (column_gather_weights, "you gathered the layer's weights"),
        (column_gather_weight_into_tensor, "you gathered the layer's weights"),
        (column_padded_all_reduce, "through dist.all_reduce"),
    ],
)
def test_column_forward_rejects_the_right_output_reached_by_the_wrong_traffic(fn, hint):
    """The output alone cannot tell: the check looks at what each rank sent."""
    res = check.column_forward(fn, world_sizes=(2, 4))
    assert not res.passed and hint in res.message, res.message
