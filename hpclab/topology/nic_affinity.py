"""Which NIC each GPU would send through: GPU-NIC affinity from the PCIe tree (ch. 02 and 06).

NCCL pairs each GPU with the network device it reaches by the shortest path in the topology it
detects (its log says so: ``via NET/IB/2/GDRDMA`` is NIC 2, read directly from GPU memory), and
decides by that same path whether the NIC may read GPU memory directly (GPUDirect RDMA;
``NCCL_NET_GDR_LEVEL`` takes the path types below: NCCL User Guide, "Environment Variables").
The path types are those of ``nvidia-smi topo -m`` (:mod:`hpclab.topology.gpu_pairs`), from the
lowest common ancestor of the GPU and the NIC in hwloc's tree:

PIX   under one PCIe switch           PHB   through the socket's host bridge
PXB   through several switches        NODE  between host bridges of one NUMA node
                                      SYS   across the sockets' interconnect (QPI/UPI)

A GPU whose nearest NIC is across the sockets sends every byte over that interconnect too,
and shares the NIC with the GPUs for which it is nearest: with ``k`` GPUs on one NIC, each
GPU's rail gets 1/k of it (:meth:`hpclab.ddp.fabric.Node.rail_gbps`).
"""

from __future__ import annotations

from typing import Any

from hpclab.topology.gpu_pairs import LEVELS, pcie_level
from hpclab.topology.hwloc import Topology

NIC_KINDS = ("infiniband", "nic")  # InfiniBand/RoCE HCAs first: NCCL's IB transport uses them
WHY = {
    "PIX": "under the same PCIe switch",
    "PXB": "through PCIe switches, not the CPU",
    "PHB": "through the CPU's PCIe host bridge, same socket",
    "NODE": "between host bridges of the same NUMA node",
    "SYS": "across the inter-socket link",
}


def nic_names(topo: Topology, nic: dict[str, Any]) -> str:
    """A NIC's OS names (``ib0 mlx4_0``), or its PCI name when hwloc kept none."""
    names = [o["name"] for o in topo.objects if o["parent"] == nic["id"] and o["kind"] == "osdev"]
    return " ".join(names) or nic["name"]


def nearest_nics(topo: Topology) -> list[dict[str, Any]]:
    """For each GPU: the NIC by the shortest PCIe path (InfiniBand before Ethernet on a tie),
    the path type, NUMA nodes, and how many GPUs end up on that NIC. [] without NICs."""
    nics = topo.of_kind(*NIC_KINDS)
    if not nics:
        return []
    rows = []
    for gpu in topo.of_kind("gpu"):
        ranked = sorted(
            nics,
            key=lambda nic: (
                LEVELS.index(pcie_level(topo, gpu, nic)),
                NIC_KINDS.index(nic["kind"]),
                nic["pci_busid"] or "",
            ),
        )
        nic = ranked[0]
        level = pcie_level(topo, gpu, nic)
        rows.append(
            {
                "gpu": gpu.get("label", gpu["name"]),
                "gpu_busid": gpu["pci_busid"],
                "gpu_numa": gpu["numa_node"],
                "nic": nic_names(topo, nic),
                "nic_kind": nic["kind"],
                "nic_busid": nic["pci_busid"],
                "nic_numa": nic["numa_node"],
                "path": level,
                "why": WHY[level],
            }
        )
    for r in rows:
        r["gpus_on_nic"] = sum(1 for x in rows if x["nic_busid"] == r["nic_busid"])
    return rows
