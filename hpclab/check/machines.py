"""Machines that chapter 02's checks try a student's function on: the bundled topologies'
GPU-pair records, the DGX-2H with its GPUs numbered in another order, and a made-up machine
where a group grown from the closest pair is not the best (``hpclab/check/topology.py``)."""

from __future__ import annotations

import functools
import random
from itertools import combinations
from typing import Any


def gpus(pairs: list[dict[str, Any]]) -> list[str]:
    """The GPU labels of a pair list, in their numbering order (GPU2 before GPU10)."""
    labels = {g for p in pairs for g in (p["gpu_a"], p["gpu_b"])}
    return sorted(labels, key=lambda g: (len(g), g))


def renumbered(pairs: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """The same machine with its GPUs numbered in another order, records in label order."""
    old = gpus(pairs)
    new = dict(zip(old, random.Random(seed).sample(old, len(old)), strict=True))
    out = []
    for p in pairs:
        a, b, na, nb = new[p["gpu_a"]], new[p["gpu_b"]], p["numa_a"], p["numa_b"]
        if (len(a), a) > (len(b), b):
            a, b, na, nb = b, a, nb, na
        out.append(dict(p, gpu_a=a, gpu_b=b, numa_a=na, numa_b=nb))
    order = {g: i for i, g in enumerate(old)}
    return sorted(out, key=lambda p: (order[p["gpu_a"]], order[p["gpu_b"]]))


def made_up() -> list[dict[str, Any]]:
    """Six GPUs: 0 and 5 share a switch (PIX), 2-3-4 sit below two levels of switches (PXB),
    all on socket 0 but on two host bridges (NODE between them); 1 is on socket 1 (SYS). The
    best three are 2, 3 and 4; a group grown from GPU0 or from the closest pair is not."""
    numa = [0, 1, 0, 0, 0, 0]
    close = {(0, 5): "PIX", (2, 3): "PXB", (2, 4): "PXB", (3, 4): "PXB"}
    return [
        {
            "gpu_a": f"GPU{a}",
            "gpu_b": f"GPU{b}",
            "pcie_path": close.get((a, b), "SYS" if 1 in (a, b) else "NODE"),
            "numa_a": numa[a],
            "numa_b": numa[b],
        }
        for a, b in combinations(range(6), 2)
    ]


@functools.cache
def machines() -> dict[str, list[dict[str, Any]]]:
    """Where -> GPU-pair records, in this order: the DGX-2H, it renumbered, the Minsky, the
    3-GPU Xeon, the made-up machine, it renumbered. Callers hand students deep copies."""
    from hpclab.topology import gpu_pairs, hwloc

    def load(name: str) -> list[dict[str, Any]]:
        return gpu_pairs.from_topology(hwloc.load(name))

    dgx2 = load("dgx2")
    return {
        "the DGX-2H": dgx2,
        "the DGX-2H with its GPUs renumbered": renumbered(dgx2, 2),
        "the POWER8 Minsky": load("power8-minsky"),
        "the two-socket Xeon with 3 GPUs": load("xeon-2s-3gpu-ib"),
        "a made-up machine (0-5 PIX, 2-3-4 PXB, 1 on socket 1)": made_up(),
        "the made-up machine with its GPUs renumbered": renumbered(made_up(), 1),
    }
