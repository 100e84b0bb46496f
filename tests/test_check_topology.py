"""Chapter 02's checks accept the solutions and reject plausible wrong answers with advice."""

from __future__ import annotations

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


def test_crossing_pairs():
    pairs = _pairs("dgx2")
    right = {(p["gpu_a"], p["gpu_b"]) for p in pairs if p["numa_a"] != p["numa_b"]}
    assert C.crossing_pairs(right, pairs)
    node = right | {("GPU0", "GPU4")}  # another host bridge of the same socket
    bad = C.crossing_pairs(node, pairs)
    assert not bad and "NODE pairs" in bad.message
    half = set(sorted(right)[:10])
    bad = C.crossing_pairs(half, pairs)
    assert not bad and "54 SYS pairs are missing" in bad.message
    every = {(p["gpu_a"], p["gpu_b"]) for p in pairs}
    bad = C.crossing_pairs(every, pairs)
    assert not bad and "PIX/PXB/PHB" in bad.message


def test_best_group():
    pairs = _pairs("dgx2")
    assert C.best_group(["GPU0", "GPU1", "GPU2", "GPU3"], pairs, 4)
    assert C.best_group(["GPU8", "GPU9"], pairs, 2)
    bad = C.best_group(["GPU0", "GPU1", "GPU2", "GPU4"], pairs, 4)
    assert not bad and "NODE" in bad.message and "PXB" in bad.message
    bad = C.best_group(["GPU0", "GPU8"], pairs, 2)
    assert not bad and "SYS" in bad.message and "one switch" in bad.message
    assert not C.best_group(["GPU0", "GPU1", "GPU2"], pairs, 4)


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
