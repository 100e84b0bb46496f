from __future__ import annotations

import time

import pytest

from hpclab.measure.timing import Timing, calls_for, time_fn


def test_statistics():
    t = Timing(samples_s=(1.0, 2.0, 3.0, 4.0, 100.0), warmup=0, clock="perf_counter")
    assert t.median_s == 3.0 and t.min_s == 1.0 and t.max_s == 100.0
    assert t.rate(6.0) == 2.0 and t.best_rate(6.0) == 6.0
    assert t.iqr_s > 0 and t.spread == pytest.approx(t.iqr_s / 3.0)
    assert t.summary()["repeats"] == 5


def test_warmup_and_repeat_counts():
    calls = []
    t = time_fn(lambda: calls.append(1), warmup=3, repeat=7)
    assert len(calls) == 3 + 7
    assert len(t.samples_s) == 7 and t.clock == "perf_counter"


def test_measures_sleep_time():
    t = time_fn(lambda: time.sleep(0.02), warmup=1, repeat=5)
    assert 0.019 < t.median_s < 0.06


def test_inner_divides_per_call():
    t = time_fn(lambda: time.sleep(0.005), warmup=1, repeat=3, inner=4)
    assert 0.0045 < t.median_s < 0.03 and t.inner == 4


def test_check_runs_before_timing_and_fails_wrong_results():
    def wrong_check(value):
        raise AssertionError("wrong answer")

    with pytest.raises(AssertionError, match="wrong answer"):
        time_fn(lambda: 41, check=wrong_check)
    seen = []
    time_fn(lambda: 42, check=seen.append, repeat=2)
    assert seen == [42]


def test_min_time_takes_more_samples():
    # Sampling goes on past `repeat` until min_time_s was measured, and stops at the first
    # sample that reaches it (how many that takes depends on the machine's load, not asserted).
    t = time_fn(lambda: time.sleep(0.002), warmup=0, repeat=2, min_time_s=0.2)
    n = len(t.samples_s)
    assert n >= 2 and sum(t.samples_s) >= 0.2
    assert n == 2 or sum(t.samples_s[:-1]) < 0.2  # more samples only while short of min_time_s


def test_calls_for():
    # ~10 calls of 2 ms fill 20 ms; a loaded machine can only make the first call slower.
    assert 1 <= calls_for(lambda: time.sleep(0.002), target_s=0.02) <= 10


def test_gemm_probe_is_checked_and_positive():
    from hpclab.compute.gemm import time_gemm

    g = time_gemm(128, "fp32", repeat=3)
    assert g.gflops > 0 and g.gflops_best >= g.gflops
