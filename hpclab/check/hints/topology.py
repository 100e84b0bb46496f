"""Hints for chapter 02's exercises (checks in ``hpclab/check/topology.py``)."""

from hpclab.check.hints import Exercise

EXERCISES = (
    Exercise(
        "pcie_bandwidth",
        (("function", "pcie_gbps(gen, width) returning GB/s in one direction"),),
        (
            "A link's bandwidth is the per-lane signalling rate x the lanes, less what the line "
            "encoding spends.",
            "Gens 1 to 6 signal at 2.5, 5, 8, 16, 32 and 64 GT/s per lane. Gens 1-2 encode 8 bits in 10, "
            "gens 3-5 128 in 130, gen 6 sends 256-byte FLITs with 242 bytes of payload. A GT/s "
            "moves one bit per lane: divide by 8 for bytes.",
            "Look up the rate and the encoding efficiency by generation (a dict, or a condition "
            "on gen), then return rate x width x efficiency / 8.",
        ),
    ),
    Exercise(
        "crossing_pairs",
        (("function", "crossing_pairs_of(pairs) returning a set of (gpu_a, gpu_b) pairs"),),
        (
            "nvidia-smi topo's level of a pair says which parts of the machine its traffic "
            "crosses; one level means crossing between the sockets. The labels' numbering "
            "says nothing about the sockets.",
            "SYS: the path goes over the link between the CPU sockets (UPI, Infinity Fabric). "
            "Each pair record has 'gpu_a', 'gpu_b' and 'pcie_path'.",
            "A set comprehension over `pairs` that keeps (gpu_a, gpu_b) when pcie_path is that "
            "level.",
        ),
    ),
    Exercise(
        "best_group",
        (("function", "best_gpus(pairs, k) returning k GPU labels"),),
        (
            "A group is as fast as its worst pair: the best group of k is the one whose worst "
            "pair uses the shortest path. The labels' numbering says nothing about the wiring.",
            "The levels order PIX < PXB < PHB < NODE < SYS (shortest first). Each pair record "
            "has 'gpu_a', 'gpu_b' and 'pcie_path'. A group grown from the closest pair, or "
            "taken from one socket, can be worse than another group: judge whole groups.",
            "Map each pair of labels to the rank of its level; collect the labels; among all "
            "groups of k labels (itertools.combinations) keep one whose largest pair rank is "
            "the smallest.",
        ),
    ),
    Exercise(
        "copy_time",
        (("function", "copy_seconds(nbytes, link_gbps, host_gbps, pinned) returning seconds"),),
        (
            "A pinned buffer goes straight over the link; a pageable one is first copied by the "
            "CPU into a pinned staging buffer.",
            "Time over the link = bytes / (GB/s x 1e9). The staging copy adds bytes / (host "
            "memcpy GB/s x 1e9), one after the other, for one buffer.",
            "Start from the link time; add the staging time only when `pinned` is false.",
        ),
    ),
    Exercise(
        "pipeline",
        (("function", "overlapped_seconds(copy_s, compute_s, steps) returning seconds"),),
        (
            "With two buffers the next batch's copy overlaps this batch's compute: a two-stage "
            "pipeline.",
            "The first copy has nothing to hide behind and the last compute nothing after it; "
            "every step between costs the slower of the two stages.",
            "One expression: the fill, plus (steps - 1) x the slower stage, plus the drain.",
        ),
    ),
)
