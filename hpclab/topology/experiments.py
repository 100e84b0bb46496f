"""Chapter 02's experiments, registered for the CLI, the widget panels and the tests.

``hpclab run topology | lanes | host-copy | p2p | overlap``.
"""

from __future__ import annotations

from hpclab.experiments import Experiment
from hpclab.topology.host_copy import HostCopyConfig, plot_host_copy, run_host_copy
from hpclab.topology.lanes import LanesConfig, plot_lanes, run_lanes
from hpclab.topology.node import TopologyConfig, plot_topology, run_topology
from hpclab.topology.overlap import OverlapConfig, plot_overlap, run_overlap
from hpclab.topology.p2p import P2PConfig, plot_p2p, run_p2p

EXPERIMENTS = [
    Experiment(
        "topology",
        "02",
        "this node's sockets, NUMA nodes, PCIe tree and GPU pairs (or --from a real machine's XML)",
        TopologyConfig,
        run_topology,
        plot_topology,
    ),
    Experiment(
        "lanes",
        "02",
        "PCIe gen x width -> GB/s, NVLink and InfiniBand, the CPU lane budget (model)",
        LanesConfig,
        run_lanes,
        plot_lanes,
    ),
    Experiment(
        "host-copy",
        "02",
        "copy bandwidth vs size: host warm/first-touch/locked; GPU pageable/pinned H2D/D2H",
        HostCopyConfig,
        run_host_copy,
        plot_host_copy,
    ),
    Experiment(
        "p2p",
        "02",
        "GPU-to-GPU copies: direct (P2P) vs staged through host memory, every pair",
        P2PConfig,
        run_p2p,
        plot_p2p,
    ),
    Experiment(
        "overlap",
        "02",
        "batch copy hidden behind compute: serial vs overlapped loop, timeline",
        OverlapConfig,
        run_overlap,
        plot_overlap,
    ),
]
