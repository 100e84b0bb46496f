"""Real fabrics in the all-reduce model: the node, its NICs, rails, in-network reduction (ch. 06).

The scaling model (:mod:`hpclab.ddp.cost_model`) prices one ring over one link. A GPU node is more:

- **inside**, a fabric: ``pcie`` (GPUs talk through PCIe switches or the CPU), ``nvlink``
  (point-to-point links between GPU pairs: a ring gets the links to its two neighbours) or
  ``nvswitch`` (every GPU's links go to NVSwitch chips: any pair talks at a GPU's full NVLink
  bandwidth, and the switch can add the data itself: NVLS);
- **across**, ``nics`` NICs of one speed. NCCL runs a ring (channel) per NIC, so a node's ring
  traffic leaves through all of them: ``nics x`` one NIC's bandwidth, capped by the fabric inside.
  A GPU that shares its NIC with ``gpus/nics - 1`` others gets ``nics/gpus`` of one NIC;
- **rails**: a rail-optimized fabric connects NIC *k* of every node to leaf switch *k*, so
  same-rail traffic crosses one switch, and cross-rail traffic goes over NVSwitch to the GPU on
  the right rail first (NCCL's PXN), then one switch. Without rails, node to node crosses leaf,
  spine and leaf (3 switches). In a non-blocking fat tree that changes the latency, not the
  bandwidth; and IB SHARP needs rails (at most 2 aggregation flows per switch, so each leaf must
  connect a single HCA rail);
- **in-network reduction**: NVLS (NVLink SHARP: the NVSwitch adds the data; NCCL >= 2.17,
  NVSwitch-based Hopper and later, one rank per GPU) inside a node, IB SHARP in the InfiniBand
  switches across nodes.

Each algorithm is latency steps x alpha + bytes x beta per link; its phases stream chunks
through different links at once, so the busiest link sets the pace (the bottleneck, as
nccl-tests' busbw says). With ``n = N x g`` GPUs on ``N`` nodes of ``g``::

    ring          2(n-1) alpha      2(n-1)/n m  on min(B_in, nics x B_nic)   (one node: B_in)
    hierarchical  reduce-scatter inside ((g-1)/g m on B_in), all-reduce of each GPU's m/g across
                  nodes on its own rail (2(N-1)/N m/g on B_nic x nics/g), all-gather inside
    nvls          (g+1)/g m on B_in: each GPU sends its buffer once for the switch to add
                  (multimem.ld_reduce, the reduce-scatter) and its 1/g of the sum once for the
                  switch to copy to all (multimem.st, the all-gather), and receives as much;
                  across nodes, each GPU's m/g all-reduced on its rail as above
    nvls+sharp    nvls inside, and the m/g of each rail sent up the switch tree once and received
                  once (bytes factor 1)

nccl-tests prints busbw = algbw x 2(n-1)/n whatever the algorithm (its ``all_reduce.cu``), so under
in-network reduction the printed busbw exceeds the wire's: on one NVSwitch node, printed / wire =
2(n-1)/n / ((n+1)/n) = 2(n-1)/(n+1) (14/9 on 8 GPUs); nccl-tests' doc lists (n-1)/(n+1) for
in-network all-reduce. Sources: NVIDIA/nccl-tests doc/PERFORMANCE.md and issues #212 (2024-05-06)
and #153; NVIDIA/nccl src/transport/nvls.cc (v2.30.7); NVIDIA, "InfiniBand Cluster Bring-up
Procedure" and HPC-X 2.26 "NCCL-RDMA-SHARP Plugins"; the figures compared in ``PUBLISHED``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpclab.config import ConfigError
from hpclab.ddp.cost_model import DEFAULT_LINK_EFFICIENCY, LINKS, Link

FABRICS = ("pcie", "nvlink", "nvswitch")
ALGORITHMS = ("ring", "hierarchical", "nvls", "nvls+sharp")
# One InfiniBand switch's port-to-port latency, order of magnitude (assumption, as ALPHA_NOTE).
SWITCH_HOP_US = 0.3


@dataclass(frozen=True)
class Node:
    """One node: ``gpus`` on an intra-node ``fabric`` of ``link`` (a LINKS preset: one GPU's
    bandwidth per direction), ``nics`` NICs of ``nic`` (a LINKS preset), rail-optimized or not."""

    gpus: int = 8
    fabric: str = "nvswitch"
    link: str = "nvlink-h100"
    nics: int = 8
    nic: str = "ib-ndr"
    rail_optimized: bool = True
    source: str = ""

    def __post_init__(self) -> None:
        if self.fabric not in FABRICS:
            raise ConfigError(f"fabric={self.fabric!r} is not allowed; allowed: {FABRICS}")
        for name, preset in (("link", self.link), ("nic", self.nic)):
            if preset not in LINKS:
                raise ConfigError(
                    f"{name}={preset!r} is not a link preset; allowed: {tuple(LINKS)}"
                )
        if self.gpus < 1:
            raise ConfigError(f"gpus={self.gpus} must be >= 1")
        if not 1 <= self.nics <= self.gpus or self.gpus % self.nics:
            raise ConfigError(f"nics={self.nics} must divide gpus={self.gpus} (1 .. {self.gpus})")

    def rail_gbps(self, efficiency: float = DEFAULT_LINK_EFFICIENCY) -> float:
        """The network bandwidth one GPU's rail gets: its share of a NIC (nics / gpus of one)."""
        return LINKS[self.nic].bandwidth_gbps * efficiency * self.nics / self.gpus

    def network_alpha_us(self, cross_rail: bool) -> float:
        """Node-to-node latency: the NIC's alpha plus the switches crossed (1 on the same rail
        of a rail-optimized fabric, else leaf-spine-leaf); cross-rail traffic on rails first
        crosses NVSwitch (the link's alpha) then one switch."""
        hops = 1 if self.rail_optimized else 3
        extra = LINKS[self.link].alpha_us if (cross_rail and self.rail_optimized) else 0.0
        return LINKS[self.nic].alpha_us + hops * SWITCH_HOP_US + extra


NODES: dict[str, Node] = {
    # NVLink 4 at 450 GB/s one way (900 both); 8 x 400 Gb/s InfiniBand per node.
    "dgx-h100": Node(
        source="8xH100 SXM on NVSwitch (NVLink 4: 450 GB/s one way, nccl-tests#212, 2024-05-06);"
        " 8 x 400 Gb/s InfiniBand, rail-optimized (NVIDIA IB cluster bring-up; MLCommons"
        " inference v3.1 Dell XE9680 system description, 2023)"
    ),
    "dgx-h100-1nic": Node(nics=1, source="the same node with one shared 400 Gb/s NIC (a what-if)"),
    "pcie-8gpu": Node(
        fabric="pcie",
        link="pcie4",
        nics=1,
        nic="ib-hdr",
        rail_optimized=False,
        source="8 PCIe 4 GPUs, one 200 Gb/s HDR NIC, fat tree (a typical older cluster node)",
    ),
}

# Published figures (the reference tier), each with its source and date, checked at the source.
PUBLISHED: tuple[dict[str, Any], ...] = (
    {
        "case": "8xH100, ring",
        "algorithm": "ring",
        "nodes": 1,
        "busbw_gbps": 370.0,
        "source": "NVIDIA/nccl-tests#212, NCCL maintainer, 2024-05-06: NCCL_ALGO=RING ~370 GB/s"
        " busbw on 8xH100 (~82% of NVLink 4's 450 GB/s)",
    },
    {
        "case": "8xH100, NVLS",
        "algorithm": "nvls",
        "nodes": 1,
        "busbw_gbps": 480.0,
        "algbw_gbps": 275.0,
        "min_bytes": 256e6,
        "source": "NVIDIA/nccl-tests#212 and #153, NCCL maintainer replies (2024): NVLS peak"
        " ~480 GB/s busbw (algbw ~275) above 256 MB",
    },
)


@dataclass(frozen=True)
class Cost:
    seconds: float
    steps: float  # latency terms
    bottleneck: str  # the link whose bytes set the pace
    algbw_gbps: float
    busbw_gbps: float  # as nccl-tests prints it: algbw x 2(n-1)/n
    wire_gbps: float  # what the bottleneck link carries per direction, per port
    link_s: dict[str, float]  # each link's bytes / bandwidth (the largest is the bottleneck)


def check_algorithm(node: Node, nodes: int, algorithm: str) -> None:
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"algorithm={algorithm!r} is not allowed; allowed: {ALGORITHMS}")
    if nodes < 1:
        raise ConfigError(f"nodes={nodes} must be >= 1")
    if algorithm.startswith("nvls") and node.fabric != "nvswitch":
        raise ConfigError(
            f"algorithm={algorithm!r} needs fabric='nvswitch' (NVLS runs in NVSwitch, Hopper and"
            f" later); this node's fabric is {node.fabric!r}"
        )
    if algorithm == "nvls+sharp" and not node.rail_optimized:
        raise ConfigError(
            "algorithm='nvls+sharp' needs rail_optimized=True (IB SHARP: one HCA rail per leaf)"
        )


def allreduce_cost(
    nbytes: float,
    node: Node,
    nodes: int = 1,
    algorithm: str = "ring",
    efficiency: float = DEFAULT_LINK_EFFICIENCY,
) -> Cost:
    """Predicted all-reduce of ``nbytes`` on ``nodes`` x ``node.gpus`` GPUs (see the module)."""
    check_algorithm(node, nodes, algorithm)
    g, big_n = node.gpus, nodes
    n = g * big_n
    inside: Link = LINKS[node.link]
    b_in = inside.bandwidth_gbps * efficiency * 1e9
    a_in = inside.alpha_us * 1e-6
    if n == 1:
        return Cost(0.0, 0.0, "", float("inf"), float("inf"), float("inf"), {})
    # link -> (bytes per direction through one port of it, that port's bandwidth)
    b_nic = LINKS[node.nic].bandwidth_gbps * efficiency * 1e9
    loads: dict[str, tuple[float, float]] = {}
    inside_key, nic_key = f"{node.link} (inside)", f"{node.nic} (NIC)"
    if algorithm == "ring":
        # Every ring hop carries 2(n-1)/n m; across nodes the rings (one per NIC) share the
        # node's NICs, and a hop from rail to rail pays NVSwitch plus the network's latency.
        steps = 2.0 * (n - 1)
        alpha = max(a_in, node.network_alpha_us(cross_rail=True) * 1e-6) if big_n > 1 else a_in
        steps_time = steps * alpha
        loads[inside_key] = (2 * (n - 1) / n * nbytes, b_in)
        if big_n > 1:
            loads[nic_key] = (2 * (n - 1) / n * nbytes / node.nics, b_nic)
    else:
        if algorithm.startswith("nvls"):
            loads[inside_key] = ((g + 1) / g * nbytes, b_in)
            steps, steps_time = 2.0, 2 * a_in
        else:  # reduce-scatter + all-gather inside
            loads[inside_key] = (2 * (g - 1) / g * nbytes, b_in)
            steps, steps_time = 2.0 * (g - 1), 2 * (g - 1) * a_in
        if big_n > 1:
            # each GPU's m/g on its rail; g/nics GPUs share a NIC
            a_net = node.network_alpha_us(cross_rail=False) * 1e-6
            if algorithm == "nvls+sharp":  # up the switch tree once, down once
                per_gpu, hops = nbytes / g, 2.0
            else:  # a ring across the nodes on each rail
                per_gpu, hops = 2 * (big_n - 1) / big_n * nbytes / g, 2.0 * (big_n - 1)
            loads[nic_key] = (per_gpu * g / node.nics, b_nic)
            steps, steps_time = steps + hops, steps_time + hops * a_net
    times = {k: v / bw for k, (v, bw) in loads.items()}
    bottleneck = max(times, key=times.get)
    seconds = steps_time + times[bottleneck]
    algbw = nbytes / seconds / 1e9
    wire = loads[bottleneck][0] / seconds / 1e9
    return Cost(seconds, steps, bottleneck, algbw, algbw * 2 * (n - 1) / n, wire, times)


def wire_from_busbw(busbw_gbps: float, n: int, algorithm: str = "nvls") -> float:
    """What each GPU's link carries per direction on one node, from the busbw nccl-tests prints
    (algbw x 2(n-1)/n): the ring's busbw is the wire's; NVLS moves (n+1)/n bytes per byte
    reduced, so its wire is busbw x (n+1) / (2(n-1))."""
    if n < 2:
        raise ConfigError(f"n={n} must be >= 2 ranks")
    if algorithm == "ring":
        return busbw_gbps
    if algorithm == "nvls":
        return busbw_gbps * (n + 1) / (2 * (n - 1))
    raise ConfigError(f"algorithm={algorithm!r} is not allowed here; allowed: ('ring', 'nvls')")
