"""Chapter 09 part 1 checks accept the solutions and reject plausible wrong answers with the
advice of the mistake each one makes (and no advice an answer does not deserve). ~0.1 s."""

from __future__ import annotations

import math

import pytest

from hpclab.check import memory as check

STATES = {"sgd": 0, "sgd-momentum": 1, "adam": 2, "adamw": 2}


def my_step_bytes(params, optimizer, precision, batch, act_per_sample):
    per = (4 + 4 if precision == "fp32" else 2 + 2 + 4) + 4 * STATES[optimizer]
    return per * params + batch * act_per_sample


def my_segments(depth, input_bytes, block_bytes, budget_bytes):
    if depth * block_bytes <= budget_bytes:
        return 0
    cost = {k: math.ceil(depth / k) * input_bytes + k * block_bytes for k in range(1, depth + 1)}
    best = min(cost, key=lambda k: (cost[k], k))
    return best if cost[best] <= budget_bytes else -1


def test_the_solutions_pass():
    assert check.step_memory(my_step_bytes)
    assert check.checkpoint_segments(my_segments)


@pytest.mark.parametrize(
    ("wrong", "advice"),
    [
        (lambda p, o, pr, b, a: (8 if pr == "fp32" else 4) * p + b * a, "state is missing"),
        (lambda p, o, pr, b, a: my_step_bytes(p, o, "fp32", b, a) / (1 + (pr == "mixed")) + 0,
         "does not halve everything"),
        (lambda p, o, pr, b, a: my_step_bytes(p, o, pr, 1, a), "grow with the batch"),
        (lambda p, o, pr, b, a: my_step_bytes(p, o, pr, b, 0), "activations (batch x bytes"),
        (lambda p, o, pr, b, a: my_step_bytes(p, o, "fp32", b, a) - 4 * p * (pr == "mixed"),
         "fp32 master copy"),
    ],
)  # fmt: skip
def test_memory_formula_mistakes_get_their_advice(wrong, advice):
    res = check.step_memory(wrong)
    assert not res and advice in res.message, res.message


def test_a_formula_wrong_in_another_way_is_shown_the_case_it_misses():
    res = check.step_memory(lambda p, o, pr, b, a: my_step_bytes(p, o, pr, b, a) * 1.5)
    assert not res and "expected" in res.message and "state is missing" not in res.message
    assert not check.step_memory(42) and "itself" in check.step_memory(42).message


@pytest.mark.parametrize(
    ("wrong", "advice"),
    [
        (lambda d, i, b, m: max(1, round(math.sqrt(d))), "k = sqrt(L) is best only"),
        (lambda d, i, b, m: 1, "every block keeps all L inputs"),
        (lambda d, i, b, m: min(range(1, d + 1), key=lambda k: (math.ceil(d / k) * i + k * b, k)),
         "whether the plain run fits"),
    ],
)  # fmt: skip
def test_checkpoint_mistakes_get_their_advice(wrong, advice):
    res = check.checkpoint_segments(wrong)
    assert not res and advice in res.message, res.message


def test_a_segment_answer_off_by_one_is_shown_the_case():
    res = check.checkpoint_segments(lambda d, i, b, m: my_segments(d, i, b, m) + 1)
    assert not res and "expected" in res.message and "sqrt" not in res.message
    raising = check.checkpoint_segments(lambda d, i, b, m: 1 / 0)
    assert not raising and "ZeroDivisionError" in raising.message
