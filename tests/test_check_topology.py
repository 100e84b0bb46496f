"""Chapter 02's checks accept the solutions and reject plausible wrong answers with advice."""

from __future__ import annotations

from itertools import combinations

import pytest

from hpclab.check import machines as M
from hpclab.check import topology as C
from hpclab.topology import gpu_pairs, hwloc
from hpclab.topology.lanes import PCIE

# --- (a) lanes arithmetic ---------------------------------------------------------------------


def _right(gen, width):
    rate, eff = {
        1: (2.5, 0.8),
        2: (5, 0.8),
        3: (8, 128 / 130),
        4: (16, 128 / 130),
        5: (32, 128 / 130),
        6: (64, 242 / 256),
    }[gen]
    return rate * width * eff / 8


def test_pcie_bandwidth_accepts_the_formula():
    assert C.pcie_bandwidth(_right)


def test_pcie_bandwidth_rejects_raw_rate_and_one_encoding_for_all():
    raw = C.pcie_bandwidth(lambda g, w: PCIE[g][0] * w / 8)
    assert not raw and "encoding overhead" in raw.message
    one = C.pcie_bandwidth(lambda g, w: PCIE[g][0] * w * 128 / 130 / 8)
    assert not one and "8 bits in 10" in one.message
    both = C.pcie_bandwidth(lambda g, w: 2 * _right(g, w))
    assert not both and "both directions" in both.message
    bits = C.pcie_bandwidth(lambda g, w: 8 * _right(g, w))
    assert not bits and "divide by 8" in bits.message
    assert "raised" in C.pcie_bandwidth(lambda g, w: 1 / 0).message
    assert "function itself" in C.pcie_bandwidth(15.75).message


# --- (b) reading a topology -----------------------------------------------------------------


def _pairs(machine):
    return gpu_pairs.from_topology(hwloc.load(machine))


def sys_pairs(pairs):
    return {(p["gpu_a"], p["gpu_b"]) for p in pairs if p["pcie_path"] == "SYS"}


def test_crossing_pairs_accepts_the_sys_pairs_and_the_numa_split():
    ok = C.crossing_pairs(sys_pairs)
    assert ok and "64 of 120" in ok.message
    assert C.crossing_pairs(
        lambda pairs: [(p["gpu_b"], p["gpu_a"]) for p in pairs if p["numa_a"] != p["numa_b"]]
    )


def _by_number(pairs):  # GPU0-7 on one socket and GPU8-15 on the other: true of the DGX-2H only
    half = len(_labels(pairs)) // 2
    return {
        (p["gpu_a"], p["gpu_b"])
        for p in pairs
        if (int(p["gpu_a"][3:]) < half) != (int(p["gpu_b"][3:]) < half)
    }


@pytest.mark.parametrize(
    "wrong, where, advice",
    [
        (_by_number, "DGX-2H with its GPUs renumbered", "it reads the labels"),
        (
            lambda pairs: (
                sys_pairs(pairs)
                | {(p["gpu_a"], p["gpu_b"]) for p in pairs if p["pcie_path"] == "NODE"}
            ),
            "on the DGX-2H:",
            "NODE pairs go between host bridges",
        ),
        (
            lambda pairs: set(sorted(sys_pairs(pairs))[:10]),
            "on the DGX-2H:",
            "54 SYS pairs are missing",
        ),
        (
            lambda pairs: {(p["gpu_a"], p["gpu_b"]) for p in pairs},
            "on the DGX-2H:",
            "PIX/PXB/PHB",
        ),
        (lambda pairs: {(p["gpu_a"], "GPU99") for p in pairs}, "on the DGX-2H:", "not GPU labels"),
        (lambda pairs: [p["gpu_a"] for p in pairs], "on the DGX-2H:", "two GPU labels"),
        (lambda pairs: None, "on the DGX-2H:", "return a set of pairs"),
        (lambda pairs: pairs[0]["nope"], "on the DGX-2H raised KeyError", "nope"),
    ],
)
def test_crossing_pairs_rejects(wrong, where, advice):
    bad = C.crossing_pairs(wrong)
    assert not bad and where in bad.message and advice in bad.message, bad.message


def test_crossing_pairs_by_number_fails_on_several_machines():
    # Not one lucky case: splitting the labels in halves is wrong on 3 of the 6 machines.
    lost = [w for w, pairs in M.machines().items() if _by_number(pairs) != sys_pairs(pairs)]
    assert len(lost) >= 2, lost


ORDER = ["PIX", "PXB", "PHB", "NODE", "SYS"]


def _labels(pairs):
    return sorted({g for p in pairs for g in (p["gpu_a"], p["gpu_b"])}, key=lambda g: int(g[3:]))


def _rank(pairs):
    return {frozenset((p["gpu_a"], p["gpu_b"])): ORDER.index(p["pcie_path"]) for p in pairs}


def best_gpus(pairs, k):  # the solution's method: every group, judged by its worst pair
    rank = _rank(pairs)
    worst = lambda g: max(rank[frozenset(q)] for q in combinations(g, 2))  # noqa: E731
    return list(min(combinations(_labels(pairs), k), key=worst))


def first_k(pairs, k):
    return _labels(pairs)[:k]


def first_k_of_socket_0(pairs, k):
    numa = {p[f"gpu_{s}"]: p[f"numa_{s}"] for p in pairs for s in "ab"}
    return [g for g in _labels(pairs) if numa[g] == 0][:k]


def grown_from(start):
    """Greedy: start from GPU0 or from the closest pair, add the GPU closest to the group."""

    def grow(pairs, k):
        rank = _rank(pairs)
        group = [_labels(pairs)[0]] if start == "gpu0" else sorted(min(rank, key=rank.get))
        while len(group) < k:
            rest = [g for g in _labels(pairs) if g not in group]
            group.append(min(rest, key=lambda g: max(rank[frozenset((g, h))] for h in group)))
        return group[:k]

    return grow


def test_best_group_accepts_every_best_group():
    assert C.best_group(best_gpus)

    def last_best(pairs, k):  # another best group of the same quality passes too
        rank = _rank(pairs)
        groups = reversed(list(combinations(_labels(pairs), k)))
        return list(min(groups, key=lambda g: max(rank[frozenset(q)] for q in combinations(g, 2))))

    assert best_gpus(*C._group_cases()[2][1:3]) != last_best(*C._group_cases()[2][1:3])
    assert C.best_group(last_best)


@pytest.mark.parametrize(
    "wrong, where, advice",
    [
        (first_k, "renumbered, k=4", "first 4 labels"),
        (first_k_of_socket_0, "renumbered, k=4", "share a socket"),
        (grown_from("gpu0"), "Xeon with 3 GPUs, k=2", "first 2 labels"),
        (grown_from("closest pair"), "made-up machine", "closest pairs"),
        (lambda pairs, k: sorted(_labels(pairs))[:k], "DGX-2H, k=4", "closest pairs"),
        (lambda pairs, k: _labels(pairs)[-k:], "renumbered, k=4", "PXB or better"),
    ],
)
def test_best_group_rejects_methods_that_only_fit_the_dgx2_numbering(wrong, where, advice):
    bad = C.best_group(wrong)
    assert not bad and where in bad.message and advice in bad.message, bad.message


def test_best_group_each_wrong_method_fails_at_several_cases():
    # Not one lucky case: each wrong method loses on at least two of the check's machines.
    for wrong in (first_k, first_k_of_socket_0, grown_from("gpu0"), grown_from("pair")):
        lost = 0
        for _, pairs, k, level, best in C._group_cases():
            got = wrong(pairs, k)
            lost += len(set(got)) != k or C._worst(tuple(got), level) != best
        assert lost >= 2, wrong


def test_best_group_says_what_it_expected():
    assert "function itself" in C.best_group(["GPU0", "GPU1", "GPU2", "GPU3"]).message
    assert "should return 4 GPU labels" in C.best_group(lambda pairs, k: None).message
    short = C.best_group(lambda pairs, k: _labels(pairs)[: k - 1])
    assert not short and "give 4 distinct GPUs" in short.message
    assert "raised KeyError" in C.best_group(lambda pairs, k: pairs[0]["nope"]).message


def test_best_group_does_not_share_its_pairs_with_the_answer():
    def clobber(pairs, k):
        for p in pairs:
            p["pcie_path"] = "PIX"
        return best_gpus(pairs, k)

    assert not C.best_group(clobber)  # it ranks on what it was given; the check does not
    assert C.best_group(best_gpus)


# --- (c) pinned vs pageable -------------------------------------------------------------------


def _copy(nbytes, link, host, pinned):
    return nbytes / (link * 1e9) + (0 if pinned else nbytes / (host * 1e9))


def test_copy_time():
    assert C.copy_time(_copy)
    same = C.copy_time(lambda n, link, h, p: n / (link * 1e9))
    assert not same and "staged" in same.message
    gib = C.copy_time(lambda n, link, h, p: _copy(n, link, h, p) * 1e9 / 2**30)
    assert not gib and "1e9 bytes" in gib.message
    par = C.copy_time(lambda n, link, h, p: n / (min(link, h) * 1e9) if not p else n / (link * 1e9))
    assert not par and "one after the other" in par.message
    always = C.copy_time(lambda n, link, h, p: _copy(n, link, h, False))
    assert not always and "no staging copy" in always.message


# --- (d) the copy/compute pipeline ------------------------------------------------------------


def test_pipeline():
    assert C.pipeline(lambda c, k, n: c + (n - 1) * max(c, k) + k)
    serial = C.pipeline(lambda c, k, n: n * (c + k))
    assert not serial and "serial loop" in serial.message
    nofill = C.pipeline(lambda c, k, n: n * max(c, k))
    assert not nofill and "first copy" in nofill.message
    compute_bound = C.pipeline(lambda c, k, n: c + n * k)
    assert not compute_bound and "copies set the pace" in compute_bound.message
