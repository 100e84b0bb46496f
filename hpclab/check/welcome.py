"""Checks for chapter 00's exercise: this CPU's theoretical fp32 peak."""

from __future__ import annotations

from typing import Any

from hpclab.check import CheckResult, as_number, exercise_check, failed, near, passed


def _physical(info: dict[str, Any]) -> int:
    """The physical cores a peak counts (older saved facts have only the logical count)."""
    return info.get("cores_physical") or info["cores_usable"]


@exercise_check
def peak(value_gflops: Any, info: dict[str, Any] | None = None) -> CheckResult:
    """Compare a student's fp32 peak (GFLOP/s) with ``system_info()`` and explain a mismatch."""
    if info is None:
        from hpclab.measure.sysinfo import system_info

        info = system_info()
    value = as_number(value_gflops, "my_peak_gflops")
    if isinstance(value, CheckResult):
        return value
    # The peak counts physical cores: SMT siblings share a core's FMA pipes.
    cores, node = _physical(info), info["cores_node"]
    logical = info["cores_usable"]
    clock, nominal = info["clock_ghz"], info.get("clock_ghz_nominal")
    fpc = info["flops_per_cycle"]["fp32"]
    if not clock:
        return failed("this machine's clock could not be measured, so there is no peak to compare")
    expected = cores * clock * fpc
    formula = f"{cores} cores x {clock:.2f} GHz x {fpc} FLOP/cycle = {expected:.1f} GFLOP/s"
    if value <= 0:
        return failed(f"a peak must be positive; expected about {formula}")
    ratio = value / expected
    if near(ratio, 1.0, 0.01):
        return passed("your fp32 peak matches system_info() within 1%.")
    # Each explanation is the factor it would make; when two give the same factor (on 2 cores,
    # "one core" and "an FMA counted once" both halve the peak) both are named as possible.
    causes: list[tuple[float, str]] = []
    if nominal and not near(nominal / clock, 1.0, 0.03):
        causes.append(
            (
                nominal / clock,
                f"you used the nominal clock ({nominal:.2f} GHz, what lscpu/cpuinfo label the CPU "
                f"with); cores run at the measured {clock:.2f} GHz, and a peak from the label "
                "makes real kernels look faster than possible",
            )
        )
    if logical != cores:
        causes.append(
            (
                logical / cores,
                f"you counted the {logical} usable logical CPUs; with SMT (hyper-threading) they "
                f"are {cores} physical cores, and two threads of one core share its FMA pipes",
            )
        )
    if node != cores and node != logical:
        causes.append(
            (
                node / cores,
                f"you counted all {node} cores of the node; your allocation can use {cores} "
                "(affinity, cgroup, SLURM_CPUS_PER_TASK)",
            )
        )
    causes.append((0.5, "an FMA (fused multiply-add) is 2 FLOPs: count each FMA lane twice"))
    causes.append((2.0, "you counted 2x too many FLOPs: did you double the FMA lanes twice?"))
    if cores > 1:
        causes.append((1.0 / cores, f"that is the peak of one core; there are {cores} usable"))
    for scale, unit in ((1e3, "MFLOP/s"), (1e9, "FLOP/s"), (1e-3, "TFLOP/s")):
        causes.append((scale, f"the answer is in GFLOP/s; yours looks like {unit}"))
    hints = [text for factor, text in causes if near(ratio, factor)]
    if len(hints) > 1:
        hints = [
            "it is "
            + f"{ratio:.2f}x the expected value, which fits more than one slip: either "
            + "; or ".join(hints)
        ]
    if not hints:
        hints.append(f"it is {ratio:.2f}x the expected value")
    return failed("; ".join(hints) + f". Expected: {formula}.")


@exercise_check
def fraction_of_peak(
    value: Any, measured_gflops: float, info: dict[str, Any] | None = None
) -> CheckResult:
    """Check the fraction of the fp32 peak that a measured GEMM reached."""
    if info is None:
        from hpclab.measure.sysinfo import system_info

        info = system_info()
    value = as_number(value, "fraction")
    if isinstance(value, CheckResult):
        return value
    expected = measured_gflops / (
        _physical(info) * info["clock_ghz"] * info["flops_per_cycle"]["fp32"]
    )
    if near(value, expected, 0.01):
        if value > 1.0:
            return failed(
                f"the arithmetic is right but {value:.0%} is above 100%: the peak must be wrong "
                "(a nominal clock?) or the timing missed work"
            )
        return passed("that is the fraction of peak this GEMM reached.")
    if near(value, expected * 100, 0.01):
        return failed(f"give a fraction between 0 and 1, not a percentage ({value:.1f})")
    if value > 0 and near(1.0 / value, expected, 0.01):
        return failed("you divided the peak by the measurement; divide the measurement by the peak")
    return failed(f"expected {expected:.3f} (measured GFLOP/s / peak GFLOP/s), got {value:.3f}")
