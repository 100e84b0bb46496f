"""Chapter 00's check accepts the right peak and explains plausible wrong ones."""

from __future__ import annotations

import pytest

from hpclab.check.welcome import peak

INFO = {
    "cores_usable": 2,
    "cores_node": 8,
    "clock_ghz": 3.65,
    "clock_ghz_nominal": 2.6,
    "flops_per_cycle": {"fp32": 32},
}
RIGHT = 2 * 3.65 * 32


def right(info):
    cores = info.get("cores_physical") or info["cores_usable"]
    return cores * info["clock_ghz"] * info["flops_per_cycle"]["fp32"]


def logical(info):
    return info["cores_usable"] * info["clock_ghz"] * info["flops_per_cycle"]["fp32"]


def test_an_smt_allocation_counts_physical_cores():
    smt = dict(INFO, cores_usable=4, cores_node=4, cores_physical=2)
    assert peak(right, smt).passed
    result = peak(logical, smt)
    assert not result.passed and "4 usable logical CPUs" in result.message
    assert "2 physical cores" in result.message


def test_counting_logical_cpus_fails_on_the_smt_allocation_even_where_they_coincide():
    # Here (no SMT) logical = physical: the SMT allocation the check also tries catches it.
    result = peak(logical, INFO)
    assert not result.passed and "logical CPUs" in result.message, result.message


def test_accepts_the_solution():
    assert peak(right, INFO).passed
    assert peak(lambda i: right(i) * 1.005, INFO).passed
    assert peak(right).passed  # this machine's system_info() and the other allocations


# Each wrong method, tried on INFO (2 usable of 8 cores, measured 3.65 GHz, labelled 2.6).
@pytest.mark.parametrize(
    "wrong, advice",
    [
        (lambda i: i["cores_usable"] * i["clock_ghz_nominal"] * 32, "nominal clock"),
        (lambda i: i["cores_node"] * i["clock_ghz"] * 32, "all 8 cores of the node"),
        (lambda i: 2 * right(i), "counts each FMA lane twice: don't double it"),
        (lambda i: i["clock_ghz"] * i["flops_per_cycle"]["fp32"], "peak of one core"),
        (lambda i: right(i) * 1e9, "looks like FLOP/s"),
        (lambda i: right(i) * 1.37, "1.37x the expected value"),
        (lambda i: "fast", "should be a number"),
        (lambda i: -5.0, "must be positive"),
        (lambda i: i["peak_gflops"]["fp32"], "raised KeyError: 'peak_gflops'"),
    ],
)
def test_rejects_wrong_answers_with_specific_advice(wrong, advice):
    result = peak(wrong, INFO)
    assert not result.passed
    assert advice in result.message, result.message


def node_cores(i):
    return i["cores_node"] * i["clock_ghz"] * i["flops_per_cycle"]["fp32"]


def label_clock(i):
    return i["cores_usable"] * (i["clock_ghz_nominal"] or 0) * i["flops_per_cycle"]["fp32"]


@pytest.mark.parametrize(
    "machine, wrong, advice",
    [
        (dict(INFO, cores_node=2), node_cores, "all 8 cores of the node"),  # like CI's
        (dict(INFO, cores_node=1, cores_usable=1), node_cores, "all 8 cores of the node"),
        (dict(INFO, clock_ghz_nominal=3.65), label_clock, "nominal clock (2.60 GHz"),
        (dict(INFO, clock_ghz_nominal=3.64), label_clock, "nominal clock (2.60 GHz"),
    ],
)
def test_a_machine_where_the_slip_coincides_does_not_let_it_pass(machine, wrong, advice):
    # On this machine the wrong method gives the right number (node cores = usable cores, or
    # the label's clock = the measured one): only the other allocations the check tries catch it.
    assert wrong(machine) == pytest.approx(right(machine), rel=0.01)
    result = peak(wrong, machine)
    assert not result.passed and advice in result.message, result.message


def test_uses_system_info_by_default():
    result = peak(lambda i: right(i) / 2)
    assert not result.passed


def test_a_function_is_expected():
    assert "function itself" in peak(RIGHT, INFO).message


@pytest.mark.parametrize(
    "value, advice",
    [
        (0.5 * 100, "not a percentage"),
        (1 / 0.5, "divided the peak by the measurement"),
        (0.3, "expected 0.500"),
    ],
)
def test_fraction_of_peak(value, advice):
    from hpclab.check.welcome import fraction_of_peak

    assert fraction_of_peak(0.5, RIGHT * 0.5, INFO).passed
    result = fraction_of_peak(value, RIGHT * 0.5, INFO)
    assert not result.passed and advice in result.message


def test_fraction_above_one_means_the_peak_is_wrong():
    from hpclab.check.welcome import fraction_of_peak

    result = fraction_of_peak(1.2, RIGHT * 1.2, INFO)
    assert not result.passed and "above 100%" in result.message


def test_a_factor_with_two_explanations_names_both_as_possible():
    # On 2 cores "one core only" and "an FMA counted as 1 FLOP" both halve the peak: the hint
    # must not assert one of them (nor state both as facts).
    result = peak(lambda i: right(i) / 2, INFO)
    assert not result.passed and "either" in result.message
    assert "peak of one core" in result.message and "FMA" in result.message
    four = dict(INFO, cores_usable=4)
    result = peak(lambda i: right(i) / 2, four)  # on 4 cores the same slip is unambiguous
    assert "either" not in result.message and "FMA" in result.message
    assert "one core" not in result.message
