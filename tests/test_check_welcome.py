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


def test_an_smt_allocation_counts_physical_cores():
    smt = dict(INFO, cores_usable=4, cores_node=4, cores_physical=2)
    assert peak(RIGHT, smt).passed
    result = peak(2 * RIGHT, smt)
    assert not result.passed and "4 usable logical CPUs" in result.message
    assert "2 physical cores" in result.message


def test_accepts_the_solution():
    assert peak(RIGHT, INFO).passed
    assert peak(RIGHT * 1.005, INFO).passed


@pytest.mark.parametrize(
    "value, advice",
    [
        (2 * 2.6 * 32, "nominal clock"),
        (8 * 3.65 * 32, "all 8 cores of the node"),
        (2 * 3.65 * 16, "an FMA (fused multiply-add) is 2 FLOPs"),
        (3.65 * 32, "peak of one core"),
        (RIGHT * 1e9, "looks like FLOP/s"),
        (RIGHT * 1.37, "1.37x the expected value"),
        ("fast", "should be a number"),
        (-5.0, "must be positive"),
    ],
)
def test_rejects_wrong_answers_with_specific_advice(value, advice):
    result = peak(value, INFO)
    assert not result.passed
    assert advice in result.message


def test_uses_system_info_by_default():
    from hpclab.measure.sysinfo import system_info

    info = system_info()
    right = info["cores_usable"] * info["clock_ghz"] * info["flops_per_cycle"]["fp32"]
    assert peak(right).passed and not peak(right / 2).passed


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
    result = peak(RIGHT / 2, INFO)
    assert not result.passed and "either" in result.message
    assert "peak of one core" in result.message and "FMA" in result.message
    four = dict(INFO, cores_usable=4)
    result = peak(4 * 3.65 * 16, four)  # on 4 cores the same slip is unambiguous
    assert "either" not in result.message and "FMA" in result.message
    assert "one core" not in result.message
