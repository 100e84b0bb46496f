"""Checks for chapter 02's exercises (PCIe topology & data movement): the lanes arithmetic,
reading a GPU-pair matrix, pinned vs pageable copy time, and the copy/compute pipeline."""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from itertools import combinations
from typing import Any

from hpclab.check import CheckResult, as_number, exercise_check, failed, near, passed
from hpclab.check import machines as M
from hpclab.topology import lanes as L
from hpclab.topology import overlap as O
from hpclab.topology.gpu_pairs import LEVELS

PCIE_CASES = ((1, 1), (2, 16), (3, 1), (3, 16), (4, 8), (5, 16), (6, 4))


def _call(fn: Callable, *args: Any) -> float | CheckResult:
    try:
        value = fn(*args)
    except Exception as exc:  # a student's function may raise anything
        return failed(f"{getattr(fn, '__name__', 'your function')}{args} raised {exc!r}")
    return as_number(value, f"{getattr(fn, '__name__', 'your function')}{args}")


@exercise_check
def pcie_bandwidth(fn: Callable[[int, int], float]) -> CheckResult:
    """(a) ``fn(gen, width)`` -> GB/s in one direction, encoding included, for gens 1-6."""
    if not callable(fn):
        return failed("pass your function itself, e.g. check.pcie_bandwidth(pcie_gbps)")
    for gen, width in PCIE_CASES:
        got = _call(fn, gen, width)
        if isinstance(got, CheckResult):
            return got
        want = L.pcie_gbps(gen, width)
        if near(got / want, 1.0, 0.01):
            continue
        rate, eff = L.PCIE[gen]
        raw = rate * width / 8
        hints = []
        if near(got / raw, 1.0, 0.005):
            hints.append(
                "that is the raw signalling rate: take off the encoding overhead "
                f"(gen {gen} carries {eff:.4g} of its bits as data)"
            )
        elif gen <= 2 and near(got / (raw * 128 / 130), 1.0, 0.005):
            hints.append("generations 1 and 2 encode 8 bits in 10 (80 %), not 128 in 130")
        elif gen == 6 and near(got / (raw * 128 / 130), 1.0, 0.005):
            hints.append("generation 6 sends 256-byte FLITs of which 242 bytes are payload")
        elif near(got / want, 2.0, 0.01):
            hints.append("that counts both directions; a copy goes one way")
        elif near(got / want, 8.0, 0.01):
            hints.append("GT/s are giga*bits*: divide by 8 for bytes")
        return failed(
            f"PCIe {gen}.0 x{width}: you return {got:.4g} GB/s, expected {want:.4g}. "
            + ("; ".join(hints) or "rate (GT/s) x width x encoding efficiency / 8 gives GB/s")
            + "."
        )
    return passed(
        "rate x lanes x encoding / 8 holds for gens 1-6: "
        f"x1 gen 2 = {L.pcie_gbps(2, 1):.2f} GB/s (the lecture's 500 MB/s), "
        f"x16 gen 3 = {L.pcie_gbps(3, 16):.2f}, x16 gen 5 = {L.pcie_gbps(5, 16):.2f} GB/s one way."
    )


def _pair(p: Any) -> tuple[str, str] | None:
    try:
        a, b = p
    except (TypeError, ValueError):
        return None
    return tuple(sorted((str(a), str(b))))  # type: ignore[return-value]


@exercise_check
def crossing_pairs(fn: Callable[[list[dict[str, Any]]], Any]) -> CheckResult:
    """(b) ``fn(pairs)`` -> the set of GPU pairs whose traffic crosses the sockets'
    interconnect (SYS), tried on the bundled machines and on them renumbered."""
    if not callable(fn):
        return failed("pass your function itself, e.g. check.crossing_pairs(crossing_pairs_of)")
    name = getattr(fn, "__name__", "your function")
    for where, pairs in M.machines().items():
        try:
            answer = fn(copy.deepcopy(pairs))
        except Exception as exc:  # a student's function may raise anything
            return failed(f"{name}(pairs) on {where} raised {exc!r}")
        wrong = _crossing_mistake(answer, pairs)
        if wrong and "renumbered" in where:  # the same machine in its first numbering passed
            wrong += (
                "; your function was right with the usual numbering, so it reads the labels: "
                "a numbering says nothing about the sockets, each pair's pcie_path does"
            )
        if wrong:
            return failed(f"on {where}: {wrong}.")
    dgx2 = M.machines()["the DGX-2H"]
    n = sum(p["pcie_path"] == "SYS" for p in dgx2)
    return passed(
        f"{n} of {len(dgx2)} pairs cross the DGX-2H's sockets (SYS), and your function finds "
        "the crossing pairs on the other machines and on them renumbered too."
    )


def _crossing_mistake(answer: Any, pairs: list[dict[str, Any]]) -> str | None:
    """None when ``answer`` is exactly the SYS pairs of ``pairs``; else what is wrong."""
    try:
        given = {_pair(p) for p in answer}
    except TypeError:
        return "return a set of pairs, e.g. {('GPU0', 'GPU4'), ...}"
    if None in given:
        return "each pair should be two GPU labels, e.g. ('GPU0', 'GPU4')"
    want = {_pair((p["gpu_a"], p["gpu_b"])) for p in pairs if p["pcie_path"] == "SYS"}
    if given == want:
        return None
    level = {_pair((p["gpu_a"], p["gpu_b"])): p["pcie_path"] for p in pairs}
    extra, missing = given - want, want - given
    hints = []
    wrong_levels = sorted({level.get(p, "unknown") for p in extra})
    if "NODE" in wrong_levels:
        hints.append("NODE pairs go between host bridges of one socket: they stay inside it")
    if {"PIX", "PXB", "PHB"} & set(wrong_levels):
        hints.append("PIX/PXB/PHB pairs meet below one CPU's root complex")
    if "unknown" in wrong_levels:
        hints.append("some pairs are not GPU labels of this machine")
    if missing:
        hints.append(
            f"{len(missing)} SYS pairs are missing (every GPU on one NUMA node "
            "with every GPU on the other)"
        )
    return "; ".join(hints)


@functools.cache
def _group_cases() -> tuple[tuple[str, list[dict[str, Any]], int, dict, int], ...]:
    """(where, pairs, k, level of each pair, the best worst level of k GPUs) per case."""
    m = M.machines()
    dgx2, shuffled = m["the DGX-2H"], m["the DGX-2H with its GPUs renumbered"]
    cases = [
        ("the DGX-2H", dgx2, 4),
        ("the DGX-2H", dgx2, 2),
        ("the DGX-2H with its GPUs renumbered", shuffled, 4),
        ("the DGX-2H with its GPUs renumbered", shuffled, 2),
        ("the DGX-2H with its GPUs renumbered", shuffled, 6),
        *((where, pairs, 2) for where, pairs in list(m.items())[2:4]),
        *((where, pairs, 3) for where, pairs in list(m.items())[4:]),
    ]
    out = []
    for where, pairs, k in cases:
        level = {_pair((p["gpu_a"], p["gpu_b"])): LEVELS.index(p["pcie_path"]) for p in pairs}
        best = min(_worst(g, level) for g in combinations(M.gpus(pairs), k))
        out.append((where, pairs, k, level, best))
    return tuple(out)


def _worst(group: tuple[str, ...], level: dict) -> int:
    return max(level[_pair(p)] for p in combinations(group, 2))


def _group_mistake(group: list[str], pairs: list[dict[str, Any]], k: int, level: dict) -> str:
    """A hint true of the group returned, when it matches a known wrong method."""
    gpus = M.gpus(pairs)
    numa = {p[f"gpu_{s}"]: p[f"numa_{s}"] for p in pairs for s in "ab"}
    if set(group) == set(gpus[:k]):
        return (
            f"that is the first {k} labels: a numbering says nothing about the wiring, so "
            "choose from the pair matrix"
        )
    if min(level[_pair(p)] for p in combinations(group, 2)) == min(level.values()):
        return (
            "your group holds one of the closest pairs, yet another group's worst pair is "
            "better: compare whole groups by their worst pair"
        )
    if len({numa[g] for g in group}) == 1:
        return (
            "your GPUs share a socket, but GPUs of one socket can still sit below different "
            "host bridges or switches"
        )
    return ""


@exercise_check
def best_group(fn: Callable[[list[dict[str, Any]], int], Any]) -> CheckResult:
    """(b) ``fn(pairs, k)`` -> ``k`` GPU labels whose worst pair uses the best path possible,
    tried on the bundled machines, on the DGX-2H renumbered, and on a made-up machine."""
    if not callable(fn):
        return failed("pass your function itself, e.g. check.best_group(best_gpus)")
    shown, cases = "", _group_cases()
    for where, pairs, k, level, best in cases:
        gpus = M.gpus(pairs)
        name = getattr(fn, "__name__", "your function")
        try:
            answer = fn(copy.deepcopy(pairs), k)
        except Exception as exc:  # a student's function may raise anything
            return failed(f"{name}(pairs, {k}) on {where} raised {exc!r}")
        try:
            group = sorted({str(g) for g in answer}, key=lambda g: (len(g), g))
        except TypeError:
            return failed(f"{name}(pairs, {k}) should return {k} GPU labels, e.g. ['GPU0', ...]")
        if len(group) != k or not set(group) <= set(gpus):
            return failed(
                f"{name}(pairs, {k}) on {where} returned {group}: give {k} distinct GPUs "
                f"of that machine ({', '.join(gpus[:3])}, ...)"
            )
        mine = _worst(tuple(group), level)
        if mine != best:
            why = _group_mistake(group, pairs, k, level)
            return failed(
                f"on {where}, k={k}: the worst pair inside {group} talks over "
                f"{LEVELS[mine]}; a group of {k} can keep every pair at {LEVELS[best]} or "
                f"better{'; ' + why if why else ''}."
            )
        shown = shown or f"{group} on {where} (worst pair {LEVELS[mine]})"
    return passed(
        f"your groups are as good as any on {len(cases)} cases "
        f"(renumbered GPUs and other machines included), e.g. {shown}."
    )


COPY_CASES = ((64 * 2**20, 12.0, 8.0), (2**30, 25.0, 10.0), (4 * 2**20, 6.0, 40.0))


@exercise_check
def copy_time(fn: Callable[[int, float, float, bool], float]) -> CheckResult:
    """(c) ``fn(nbytes, link_gbps, host_gbps, pinned)`` -> seconds: pinned goes straight over
    the link; pageable is first copied into the driver's pinned buffer (host memcpy), then
    sent, one after the other."""
    if not callable(fn):
        return failed("pass your function itself, e.g. check.copy_time(copy_seconds)")
    for nbytes, link, host in COPY_CASES:
        for pinned in (True, False):
            got = _call(fn, nbytes, link, host, pinned)
            if isinstance(got, CheckResult):
                return got
            want = nbytes / (link * 1e9) + (0 if pinned else nbytes / (host * 1e9))
            if near(got / want, 1.0, 0.01):
                continue
            if near(got * 1e9 / 2**30 / want, 1.0, 0.01) or near(got / want, 1e9 / 2**30, 0.01):
                hint = "GB/s here means 1e9 bytes per second, not 2**30"
            elif not pinned and near(got / (nbytes / (link * 1e9)), 1.0, 0.01):
                hint = "a pageable copy is staged: a host memcpy into a pinned buffer first"
            elif pinned and near(got / (nbytes / (link * 1e9) + nbytes / (host * 1e9)), 1.0, 0.01):
                hint = "pinned memory needs no staging copy: the GPU reads it directly"
            elif not pinned and near(
                got / max(nbytes / (link * 1e9), nbytes / (host * 1e9)), 1.0, 0.01
            ):
                hint = "the staging copy and the transfer of one buffer run one after the other"
            else:
                hint = "seconds = bytes / (GB/s x 1e9), plus the staging copy when pageable"
            kind = "pinned" if pinned else "pageable"
            return failed(
                f"{nbytes >> 20} MiB {kind} over {link} GB/s (host {host} GB/s): you return "
                f"{got:.4g} s, expected {want:.4g} s; {hint}."
            )
    return passed("pinned = bytes / link; pageable adds bytes / host memcpy for the staging copy.")


PIPE_CASES = ((0.010, 0.030, 8), (0.030, 0.010, 8), (0.005, 0.005, 2), (0.002, 0.050, 100))


@exercise_check
def pipeline(fn: Callable[[float, float, int], float]) -> CheckResult:
    """(d) ``fn(copy_s, compute_s, steps)`` -> total seconds of the overlapped loop."""
    if not callable(fn):
        return failed("pass your function itself, e.g. check.pipeline(overlapped_seconds)")
    for c, k, n in PIPE_CASES:
        got = _call(fn, c, k, n)
        if isinstance(got, CheckResult):
            return got
        want = O.pipelined_total(c, k, n)
        if near(got / want, 1.0, 1e-6):
            continue
        if near(got / O.serial_total(c, k, n), 1.0, 1e-6):
            hint = "that is the serial loop: with two buffers the next copy runs during compute"
        elif near(got / (n * max(c, k)), 1.0, 1e-6):
            hint = "the first copy has nothing to hide behind, and the last compute comes after it"
        elif near(got / (c + n * k), 1.0, 1e-6):
            hint = "when the copy is slower than the compute, the copies set the pace"
        else:
            hint = (
                "steady state costs max(copy, compute) per step; add the pipeline's fill and drain"
            )
        return failed(
            f"copy {c * 1e3:g} ms, compute {k * 1e3:g} ms, {n} steps: you return {got:.4g} s, "
            f"expected {want:.4g} s; {hint}."
        )
    return passed(
        "copy + (steps - 1) x max(copy, compute) + compute, for copy- and compute-bound loops."
    )
