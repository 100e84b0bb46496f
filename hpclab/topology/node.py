"""Experiment ``topology`` (chapter 02): this node, or a real machine from its hwloc XML, drawn.

``hpclab run topology`` asks hwloc's ``lstopo`` for this node's tree, adds what sysfs says about
each PCI link (generation, width, NUMA node) and, on a GPU node, the GPU-pair matrix from NVML
or ``nvidia-smi topo -m``. ``hpclab run topology --from dgx2`` (or ``--from FILE.xml``) replays
a real machine instead, the way ``lstopo --input FILE.xml`` does: a student without a GPU node
can still read a DGX-2's PCIe switches and NVSwitches.

Records: one per object (``record="object"``, with ``kind`` and ``numa_node``), one per GPU pair
(``record="gpu_pair"``, ``link`` = NV/PIX/PXB/PHB/NODE/SYS) and one ``record="summary"`` with
the counts and a ``note`` saying in plain words what this machine can and cannot show.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpclab.config import Config, ConfigError, param
from hpclab.display import figure
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.topology import gpu_pairs, hwloc, sysfs
from hpclab.topology.drawing import plot_matrix, plot_tree

SOURCE = "hwloc test suite (github.com/open-mpi/hwloc, tests/hwloc/xml, BSD-3-Clause): {file}"


@dataclass(frozen=True)
class TopologyConfig(Config):
    from_: str = param(
        "this",
        help="this (lstopo on this node), a bundled machine ("
        + ", ".join(hwloc.bundled_machines())
        + ") or a path to an hwloc XML file",
    )
    detail: str = param("io", choices=("io", "full"), help="io: the PCIe tree; full: every object")

    def check(self) -> None:
        if self.from_ != "this":
            hwloc.machine_path(self.from_)  # raises a one-line ConfigError


def _this_node(progress: Progress) -> tuple[hwloc.Topology, list[dict[str, Any]], str, str]:
    """(topology, pairs, pairs' source, note) for the machine this kernel runs on."""
    devices = sysfs.pci_devices()
    notes = [sysfs.describe(devices)]
    try:
        topo = hwloc.load("this")
    except (RuntimeError, OSError) as exc:
        # Without hwloc: a machine with its PCI devices straight under it, from sysfs alone.
        notes.append(f"{exc}; the tree below is read from sysfs alone.")
        objects = [{"id": "o0", "parent": None, "kind": "machine", "name": "this node"}]
        objects[0].update(depth=0, numa_node=0, package=None, link_gbps=None)
        for i, d in enumerate(devices, start=1):
            objects.append(
                {**d, "id": f"o{i}", "parent": "o0", "name": f"{d['kind']} {d['pci_busid']}"}
            )
            objects[-1].update(depth=1, link_gbps=None)
        topo = hwloc.Topology("this node", "sysfs", objects)
        hwloc.name_gpus(topo)
    by_bus = {d["pci_busid"]: d for d in devices}
    for o in topo.objects:
        link = by_bus.get(o.get("pci_busid") or "")
        if link:
            o.update(
                {k: link[k] for k in ("link_gen", "link_width", "max_link_gen", "max_link_width")}
            )
            if link["numa_node"] is not None:
                o["numa_node"] = link["numa_node"]
    progress.update(1, 2, "GPU pairs")
    pairs, source, pair_note = gpu_pairs.live_pairs()
    if not pairs:
        pairs = gpu_pairs.from_topology(topo)
        source = "hwloc tree" if pairs else ""
    if pair_note and not pairs:
        notes.append(pair_note)
    return topo, pairs, source, " ".join(n for n in notes if n)


def run_topology(config: TopologyConfig, progress: Progress) -> Result:
    progress.update(0, 2, "reading the topology")
    if config.from_ == "this":
        topo, pairs, pair_source, note = _this_node(progress)
        tier, extra = "live", {}
    else:
        topo = hwloc.load(config.from_)
        pairs, pair_source = gpu_pairs.from_topology(topo), "hwloc tree"
        tier = "reference"
        extra = {"source": SOURCE.format(file=topo.source.rsplit("/", 1)[-1])}
        note = (
            f"Replayed from {topo.name}'s hwloc XML"
            + (
                f" ({hwloc.bundled_machines()[topo.name]})"
                if topo.name in hwloc.bundled_machines()
                else ""
            )
            + "."
        )
        if topo.nvlink_gbps:
            note += " NVLink bandwidths come from hwloc's NVLinkBandwidth matrix in the file."
    counts = topo.counts()
    records: list[dict[str, Any]] = [
        {
            "tier": tier,
            **extra,
            "record": "summary",
            "machine": topo.name,
            "packages": counts.get("package", 0),
            "numa_nodes": counts.get("numa", 0),
            "cores": counts.get("core", 0),
            "gpus": counts.get("gpu", 0),
            "pcie_switches": counts.get("switch", 0),
            "nvswitches": counts.get("nvswitch", 0),
            "host_bridges": counts.get("hostbridge", 0),
            "pairs_source": pair_source,
            "note": note,
        }
    ]
    for o in topo.objects:
        records.append({"tier": tier, **extra, "record": "object", **o})
    for p in pairs:
        records.append({"tier": tier, **extra, "record": "gpu_pair", **p})
    progress.update(2, 2, "done")
    return make_result("topology", config, records, timed=False)  # what hwloc read: no speed


def topology_of(result: Result) -> hwloc.Topology:
    """The :class:`Topology` back from a result's object records (to draw a saved run)."""
    objects = [dict(r) for r in result.records if r.get("record") == "object"]
    if not objects:
        raise ConfigError("this result has no object records to draw")
    summary = next((r for r in result.records if r.get("record") == "summary"), {})
    return hwloc.Topology(summary.get("machine", "machine"), "", objects)


@figure
def plot_topology(result: Result):
    """The tree (colour = kind, edge width = link GB/s); see :func:`plot_pairs` for the matrix."""
    topo = topology_of(result)
    detail = result.config.get("detail", "io")
    return plot_tree(topo, detail=detail)


@figure
def plot_pairs(result: Result):
    """The GPU-pair matrix (NV/PIX/PXB/PHB/NODE/SYS), or an empty figure saying there are none."""
    import plotly.graph_objects as go

    pairs = [r for r in result.records if r.get("record") == "gpu_pair"]
    summary = next((r for r in result.records if r.get("record") == "summary"), {})
    if not pairs:
        fig = go.Figure()
        fig.update_layout(title=f"{summary.get('machine', '')}: fewer than two GPUs, no pairs")
        return fig
    return plot_matrix(pairs, title=f"{summary.get('machine', '')}: GPU pairs (colour = PCIe path)")
