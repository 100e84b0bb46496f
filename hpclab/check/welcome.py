"""Checks for chapter 00's exercise: this CPU's theoretical fp32 peak."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hpclab.check import CheckResult, as_number, exercise_check, failed, near, passed
from hpclab.check.cases import case_by_case, slips_near

# Allocations unlike a laptop's or CI's: fewer usable cores than the node has, a label's clock
# apart from the measured one, SMT (two logical CPUs per physical core), several widths of FMA
# units.
OTHER_ALLOCATIONS = (
    {"cores_usable": 2, "cores_node": 8, "cores_physical": 2, "clock_ghz": 3.65,
     "clock_ghz_nominal": 2.6},
    {"cores_usable": 16, "cores_node": 64, "cores_physical": 8, "clock_ghz": 2.0,
     "clock_ghz_nominal": 2.45},
    {"cores_usable": 6, "cores_node": 6, "cores_physical": 6, "clock_ghz": 2.9,
     "clock_ghz_nominal": None},
)  # fmt: skip
OTHER_FLOPS = (32, 64, 16)  # fp32 FLOPs per cycle per core of each allocation above
_ANSWERS = ("peak_gflops", "peak_derivation")  # what the function must compute, not read


def allocations(info: dict[str, Any]) -> list[dict[str, Any]]:
    """This machine's ``system_info()`` less its own peak (when its clock is known), then the
    other allocations, as ``system_info()`` dicts."""
    mine = {k: v for k, v in info.items() if k not in _ANSWERS}
    others = [
        dict(a, flops_per_cycle={"fp32": f, "fp64": f // 2})
        for a, f in zip(OTHER_ALLOCATIONS, OTHER_FLOPS, strict=True)
    ]
    return ([mine] if mine.get("clock_ghz") else []) + others


@exercise_check
def peak(fn: Callable[[dict[str, Any]], float], info: dict[str, Any] | None = None) -> CheckResult:
    """``fn(info)`` -> the fp32 peak (GFLOP/s) of the allocation a ``system_info()`` dict
    describes, tried on this machine's and on allocations whose usable cores and clocks differ
    from the node's and the label's."""
    if not callable(fn):
        return failed("pass your function itself, e.g. peak(peak_gflops)")
    if info is None:
        from hpclab.measure.sysinfo import system_info

        info = system_info()
    name = getattr(fn, "__name__", "your function")
    cases = [(_describe(case), (case,)) for case in allocations(info)]
    wrong = case_by_case(fn, cases, f"{name}(info)", _explain)
    return (
        wrong
        if wrong is not None
        else passed(
            "your peak matches within 1% on this machine and on allocations where usable cores and "
            "clocks differ from the node's and the label's."
        )
    )


def _physical(info: dict[str, Any]) -> int:
    """The physical cores a peak counts (older saved facts have only the logical count)."""
    return info.get("cores_physical") or info["cores_usable"]


def _peak(info: dict[str, Any]) -> float:
    """The allocation's fp32 peak in GFLOP/s: SMT siblings share a core's FMA pipes, so it
    counts physical cores."""
    return _physical(info) * info["clock_ghz"] * info["flops_per_cycle"]["fp32"]


def _describe(info: dict[str, Any]) -> str:
    nominal = info.get("clock_ghz_nominal")
    label = f", labelled {nominal:.2f} GHz" if nominal else ""
    phys = _physical(info)
    smt = f" ({phys} physical)" if phys != info["cores_usable"] else ""
    return (
        f"{info['cores_usable']} usable of {info['cores_node']} cores{smt} at "
        f"{info['clock_ghz']:.2f} GHz{label}, {info['flops_per_cycle']['fp32']} fp32 FLOP/cycle"
    )


def _explain(value: float, info: dict[str, Any]) -> str | None:
    """None when ``value`` is this allocation's fp32 peak within 1%; else why it is not: the
    slips whose factor it shows."""
    cores, clock, fpc = _physical(info), info["clock_ghz"], info["flops_per_cycle"]["fp32"]
    formula = f"{cores} cores x {clock:.2f} GHz x {fpc} FLOP/cycle = {_peak(info):.1f} GFLOP/s"
    if value <= 0:
        return f"a peak must be positive; expected about {formula}"
    ratio = value / _peak(info)
    if near(ratio, 1.0, 0.01):
        return None
    # Each slip is the factor it would make; when two give the same factor (on 2 cores,
    # "one core" and "an FMA counted once" both halve the peak) both are named as possible.
    hints = slips_near(ratio, _slips(info))
    if len(hints) > 1:
        hints = [
            "it is "
            + f"{ratio:.2f}x the expected value, which fits more than one slip: either "
            + "; or ".join(hints)
        ]
    if not hints:
        hints.append(f"it is {ratio:.2f}x the expected value")
    return "; ".join(hints) + f". Expected: {formula}"


def _slips(info: dict[str, Any]) -> list[tuple[float, str]]:
    """The plausible slips on this allocation, each with the factor it makes the peak off by."""
    cores, node, logical = _physical(info), info["cores_node"], info["cores_usable"]
    clock, nominal = info["clock_ghz"], info.get("clock_ghz_nominal")
    causes: list[tuple[float, str]] = []
    if nominal and not near(nominal / clock, 1.0, 0.03):
        causes.append(
            (
                nominal / clock,
                f"you used the nominal clock ({nominal:.2f} GHz, what lscpu/cpuinfo label the CPU "
                f"with); cores run at the measured {clock:.2f} GHz, and a peak from the label "
                + (
                    "makes real kernels look faster than possible"
                    if nominal < clock
                    else "makes real kernels look slower than they are"
                ),
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
    causes.append(
        (
            0.5,
            "flops_per_cycle already counts an FMA (fused multiply-add) as 2 FLOPs: don't halve it",
        )
    )
    causes.append((2.0, "flops_per_cycle already counts each FMA lane twice: don't double it"))
    if cores > 1:
        causes.append((1.0 / cores, f"that is the peak of one core; there are {cores} usable"))
    for scale, unit in ((1e3, "MFLOP/s"), (1e9, "FLOP/s"), (1e-3, "TFLOP/s")):
        causes.append((scale, f"the answer is in GFLOP/s; yours looks like {unit}"))
    return causes


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
    expected = measured_gflops / _peak(info)
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
