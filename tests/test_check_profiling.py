"""Chapter 03's exercise checks accept the solutions and reject plausible wrong answers with
true hints."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from hpclab.check import profiling as check
from hpclab.profiling.patient import MEAN, STD, EncodedImages

# --- (a) top self time ----------------------------------------------------------------------


def solution_top_self(stats):
    func = max(stats.stats, key=lambda f: stats.stats[f][2])
    return func[2], stats.stats[func][2] / stats.total_tt


def test_top_self_accepts_solution():
    assert check.top_self(solution_top_self).passed


def test_top_self_rejects_cumulative_and_percent():
    def by_cumtime(stats):
        func = max((f for f in stats.stats if stats.stats[f][4]), key=lambda f: stats.stats[f][3])
        return func[2], stats.stats[func][3] / stats.total_tt

    res = check.top_self(by_cumtime)
    assert not res.passed and "cumulative" in res.message

    def percent(stats):
        name, share = solution_top_self(stats)
        return name, 100 * share

    res = check.top_self(percent)
    assert not res.passed and "fraction" in res.message

    res = check.top_self(lambda stats: ("<listcomp>", 0.3))  # the patient's answer, hard-coded
    assert not res.passed and "not the function" in res.message


def test_top_self_rejects_the_cumulative_share_of_the_right_function():
    """Right name, cumulative time: equal to the self time for a function that calls nothing,
    so a profile whose top self-time function calls another is needed to tell them apart."""

    def cum_share(stats):
        func = max(stats.stats, key=lambda f: stats.stats[f][2])
        return func[2], stats.stats[func][3] / stats.total_tt

    res = check.top_self(cum_share)
    assert not res.passed and "*cumulative* time" in res.message and "_heavy" in res.message

    def share_of_itself(stats):  # self / its own cumulative time
        func = max(stats.stats, key=lambda f: stats.stats[f][2])
        return func[2], stats.stats[func][2] / stats.stats[func][3]

    res = check.top_self(share_of_itself)
    assert not res.passed and "stats.total_tt" in res.message, res.message


# --- (b) the leak ---------------------------------------------------------------------------


def solution_monitor(model, loss_fn, x, y):
    with torch.no_grad():
        return loss_fn(model(x), y)


def test_monitor_accepts_solution():
    res = check.monitor_loss(solution_monitor)
    assert res.passed, res.message


def test_monitor_rejects_graph_and_item():
    res = check.monitor_loss(lambda model, loss_fn, x, y: loss_fn(model(x), y))
    assert not res.passed and "grad_fn" in res.message
    res = check.monitor_loss(
        lambda model, loss_fn, x, y: solution_monitor(model, loss_fn, x, y).item()
    )
    assert not res.passed and "item" in res.message
    res = check.monitor_loss(
        lambda model, loss_fn, x, y: solution_monitor(model, loss_fn, x, y) * len(x)
    )
    assert not res.passed and "expected" in res.message


def test_monitor_rejects_a_tensor_rebuilt_from_a_python_number():
    """No graph, the right value, flat memory: only the way it was made is wrong (a sync)."""
    for wrong in (
        lambda model, loss_fn, x, y: torch.tensor(loss_fn(model(x), y).item()),
        lambda model, loss_fn, x, y: torch.as_tensor(float(solution_monitor(model, loss_fn, x, y))),
    ):
        res = check.monitor_loss(wrong)
        assert not res.passed and "made it from a Python number" in res.message, res.message
    # detaching keeps it a tensor: no number is read, so no sync
    res = check.monitor_loss(lambda model, loss_fn, x, y: loss_fn(model(x), y).detach())
    assert res.passed, res.message


# --- (c) the data path ----------------------------------------------------------------------


class SolutionImages(EncodedImages):
    def __getitems__(self, indices):
        buf = np.frombuffer(b"".join(self.raw[i] for i in indices), dtype=np.uint8)
        x = ((buf.reshape(len(indices), -1) / 255.0 - MEAN) / STD).astype(np.float32)
        return torch.from_numpy(x), torch.tensor([self.labels[i] for i in indices])


class NoNormalise(EncodedImages):
    def __getitems__(self, indices):
        buf = np.frombuffer(b"".join(self.raw[i] for i in indices), dtype=np.uint8)
        x = (buf.reshape(len(indices), -1) / 255.0).astype(np.float32)
        return torch.from_numpy(x), torch.tensor([self.labels[i] for i in indices])


class StillPerSample(EncodedImages):
    def __getitems__(self, indices):
        xs, ys = zip(*(self[i] for i in indices), strict=True)
        return torch.stack(xs), torch.tensor(ys)


def test_fast_dataset_accepts_solution():
    res = check.fast_dataset(SolutionImages)
    assert res.passed, res.message


def test_fast_dataset_rejects_wrong_values_and_slow_loop():
    res = check.fast_dataset(NoNormalise)
    assert not res.passed and "MEAN" in res.message
    res = check.fast_dataset(StillPerSample)
    assert not res.passed and "faster" in res.message
    res = check.fast_dataset(EncodedImages)
    assert not res.passed and "__getitems__" in res.message


# --- (d) operator table and roofline --------------------------------------------------------

TABLE = pd.DataFrame(  # sorted by self time, as hpclab's torch table is
    [
        {"operator": "aten::addmm", "self_cpu_seconds": 0.04, "cpu_total_seconds": 0.045},
        {"operator": "aten::linear", "self_cpu_seconds": 0.003, "cpu_total_seconds": 0.05},
        {"operator": "aten::relu", "self_cpu_seconds": 0.002, "cpu_total_seconds": 0.002},
    ]
)


def top_op(table):
    return table.sort_values("self_cpu_seconds").iloc[-1]["operator"]


def solution_bound(m, k, n, ridge):
    intensity = 2 * m * k * n / (4 * (m * k + k * n + m * n))
    return "compute" if intensity >= ridge else "memory"


def test_matmul_bound_accepts_solution():
    assert check.matmul_bound(solution_bound, top_op, TABLE).passed


@pytest.mark.parametrize(
    "wrong",
    [
        lambda m, k, n, r: (
            "compute" if m * k * n / (4 * (m * k + k * n + m * n)) >= r else "memory"
        ),
        lambda m, k, n, r: "compute" if 2 * m * k * n / (m * k + k * n + m * n) >= r else "memory",
    ],
    ids=["no-factor-2", "elements-not-bytes"],
)
def test_matmul_bound_rejects_wrong_intensity(wrong):
    res = check.matmul_bound(wrong, top_op, TABLE)
    assert not res.passed and "2 per multiply-add" in res.message


@pytest.mark.parametrize(
    "wrong, advice",
    [
        (lambda t: t.sort_values("cpu_total_seconds").iloc[-1]["operator"], "*total* time"),
        (lambda t: t.iloc[0]["operator"], "first row"),  # right only while sorted by self
        (lambda t: t["operator"].iloc[0], "first row"),
        (lambda t: "aten::addmm", "aten::mkldnn_convolution"),  # right in the first tables
        (lambda t: t.sort_values("self_cpu_seconds").iloc[0]["operator"], "not the operator"),
        (lambda t: 1 / 0, "raised ZeroDivisionError"),
    ],
)
def test_matmul_bound_rejects_top_operator_methods_that_fit_one_table(wrong, advice):
    # On the student's table (sorted by self time) the first two pass: other tables catch them.
    res = check.matmul_bound(solution_bound, wrong, TABLE)
    assert not res.passed and advice in res.message, res.message


def test_matmul_bound_wants_a_function_for_the_operator():
    res = check.matmul_bound(solution_bound, "aten::addmm", TABLE)
    assert not res.passed and "function itself" in res.message


@pytest.mark.parametrize(
    "strict",
    [
        lambda m, k, n, r: (
            "compute" if 2 * m * k * n / (4 * (m * k + k * n + m * n)) > r else "memory"
        ),
        lambda m, k, n, r: (
            "memory" if 2 * m * k * n / (4 * (m * k + k * n + m * n)) <= r else "compute"
        ),
    ],
    ids=["greater", "memory-at-or-below"],
)
def test_matmul_bound_tries_a_kernel_exactly_on_the_ridge(strict):
    res = check.matmul_bound(strict, top_op, TABLE)
    assert not res.passed and "the ridge point itself" in res.message, res.message
