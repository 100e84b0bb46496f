"""The GPU-pair matrix, as ``nvidia-smi topo -m`` prints it (chapter 02).

For every pair of GPUs, the path their data takes when one copies to the other:

====  ==========================================================================
NV    NVLink, directly or through NVSwitches (no PCIe, no CPU)
PIX   through at most one PCIe switch (the two GPUs sit under the same switch)
PXB   through several PCIe switches/bridges, without the CPU's host bridge
PHB   through a PCIe host bridge (the CPU's root complex)
NODE  between host bridges of one NUMA node (inside one CPU socket)
SYS   across the sockets' interconnect (QPI/UPI, Infinity Fabric, X-Bus)
====  ==========================================================================

The order is from best to worst: P2P copies through a switch (PIX/PXB) do not touch the CPU;
SYS pairs often cannot use P2P at all and are staged through host memory. Three sources give
the matrix: an hwloc tree (any machine, bundled XMLs too), NVML (``nvidia-ml-py``, when a
driver is present), or the text of ``nvidia-smi topo -m``.
"""

from __future__ import annotations

import shutil
import subprocess
from itertools import combinations
from typing import Any

from hpclab.topology.hwloc import Topology

LEVELS = ("NV", "PIX", "PXB", "PHB", "NODE", "SYS")  # best first
# NVML's nvmlGpuTopologyLevel_t values -> nvidia-smi's names.
NVML_LEVELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def pcie_level(topo: Topology, a: dict[str, Any], b: dict[str, Any]) -> str:
    """PIX/PXB/PHB/NODE/SYS from the lowest common ancestor of two devices (GPUs, NICs) in the
    hwloc tree."""
    up_a, up_b = topo.ancestors(a), topo.ancestors(b)
    ids_b = [o["id"] for o in up_b]
    common = next(o for o in up_a if o["id"] in ids_b)
    if a["numa_node"] != b["numa_node"]:
        return "SYS"
    if common["kind"] == "switch":
        # Under one switch: each GPU hangs on a downstream port, a direct child of the switch.
        below_a = up_a[: [o["id"] for o in up_a].index(common["id"])]
        below_b = up_b[: ids_b.index(common["id"])]
        one_switch = all(o["kind"] == "bridge" for o in below_a + below_b) and (
            len(below_a) <= 1 and len(below_b) <= 1
        )
        return "PIX" if one_switch else "PXB"
    if common["kind"] == "bridge":
        return "PXB"
    if common["kind"] == "hostbridge":
        return "PHB"
    return "NODE"


def _nvlink_gbps(topo: Topology, a: str, b: str) -> float | None:
    """NVLink GB/s (one direction) between GPUs labelled ``a`` and ``b``, direct or switched."""
    direct = topo.nvlink_gbps.get((a, b))
    if direct:
        return direct
    # Through NVSwitches: hwloc lists GPU<->NVSwitch links only. The NVSwitches of one machine
    # form one fabric (on a DGX-2 the two baseboards' switches are joined by NVLink trunks),
    # so a pair reaches each other at the smaller of the two GPUs' total switch bandwidth.
    to_switch = {}
    for gpu in (a, b):
        to_switch[gpu] = sum(
            v for (x, y), v in topo.nvlink_gbps.items() if x == gpu and y.startswith("nvswitch")
        )
    if to_switch[a] > 0 and to_switch[b] > 0:
        return min(to_switch[a], to_switch[b])
    return None


def from_topology(topo: Topology) -> list[dict[str, Any]]:
    """One record per unordered GPU pair: ``gpu_a``, ``gpu_b``, ``link`` (NV/PIX/...),
    ``pcie_path`` (the PCIe level even when NVLink exists), ``nvlink_gbps``, NUMA nodes."""
    gpus = topo.of_kind("gpu")
    out = []
    for a, b in combinations(gpus, 2):
        pcie = pcie_level(topo, a, b)
        nv = _nvlink_gbps(topo, a["label"], b["label"])
        out.append(
            {
                "gpu_a": a["label"],
                "gpu_b": b["label"],
                "link": "NV" if nv else pcie,
                "pcie_path": pcie,
                "nvlink_gbps": nv,
                "numa_a": a["numa_node"],
                "numa_b": b["numa_node"],
                "crosses_sockets": pcie == "SYS",
            }
        )
    return out


def matrix(pairs: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The square matrix (labels, rows) of ``link`` values with ``X`` on the diagonal."""
    labels = sorted({p["gpu_a"] for p in pairs} | {p["gpu_b"] for p in pairs}, key=gpu_sort_key)
    cell = {(p["gpu_a"], p["gpu_b"]): p["link"] for p in pairs}
    cell.update({(b, a): v for (a, b), v in list(cell.items())})
    return labels, [[("X" if a == b else cell.get((a, b), "?")) for b in labels] for a in labels]


def gpu_sort_key(label: str) -> tuple[int, str]:
    digits = "".join(ch for ch in label if ch.isdigit())
    return (int(digits) if digits else 0, label)


# --- live sources --------------------------------------------------------------------------


def from_nvml() -> tuple[list[dict[str, Any]], str]:
    """Pairs from NVML (``pip install nvidia-ml-py``). Returns (pairs, note); the note says in
    one sentence why there are none (no package, no driver, one GPU)."""
    try:
        import pynvml
    except ImportError:
        return [], "NVML is not available here (the nvidia-ml-py package is not installed)."
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:  # NVMLError_LibraryNotFound without a driver
        return [], f"NVML could not start ({exc}): no NVIDIA driver on this machine."
    try:
        n = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        out = []
        for i, j in combinations(range(n), 2):
            level = NVML_LEVELS.get(
                int(pynvml.nvmlDeviceGetTopologyCommonAncestor(handles[i], handles[j])), "SYS"
            )
            links = _nvml_links(pynvml, handles[i], handles[j])
            out.append(
                {
                    "gpu_a": f"GPU{i}",
                    "gpu_b": f"GPU{j}",
                    "link": f"NV{links}" if links else level,
                    "pcie_path": level,
                    "nvlink_count": links,
                    "crosses_sockets": level == "SYS",
                }
            )
        return out, "" if n > 1 else f"NVML sees {n} GPU: there are no pairs."
    finally:
        pynvml.nvmlShutdown()


def _nvml_links(pynvml: Any, a: Any, b: Any) -> int:
    """Active NVLinks from GPU ``a`` whose far end is GPU ``b`` (0 without NVLink)."""
    target = pynvml.nvmlDeviceGetPciInfo(b).busId
    count = 0
    for link in range(18):  # NVML_NVLINK_MAX_LINKS on Hopper
        try:
            if not pynvml.nvmlDeviceGetNvLinkState(a, link):
                continue
            if pynvml.nvmlDeviceGetNvLinkRemotePciInfo(a, link).busId == target:
                count += 1
        except pynvml.NVMLError:
            break
    return count


def parse_nvidia_smi(text: str) -> list[dict[str, Any]]:
    """Pairs from the text of ``nvidia-smi topo -m`` (the GPU rows of its matrix)."""
    lines = [ln.rstrip() for ln in text.splitlines() if ln.strip()]
    header = next((ln.split() for ln in lines if ln.split()[:1] == ["GPU0"]), None)
    if header is None:
        return []
    gpus = [h for h in header if h.startswith("GPU")]
    out = []
    for ln in lines:
        cells = ln.split()
        if not cells or cells[0] not in gpus or cells[0] == ln.strip():
            continue
        a = cells[0]
        for col, b in enumerate(gpus, start=1):
            if col < len(cells) and gpu_sort_key(b) > gpu_sort_key(a):
                link = cells[col]
                pcie = link if link in LEVELS else "?"
                out.append(
                    {
                        "gpu_a": a,
                        "gpu_b": b,
                        "link": link,
                        "pcie_path": pcie,
                        "crosses_sockets": link == "SYS",
                    }
                )
    return out


def from_nvidia_smi(timeout_s: float = 20.0) -> tuple[list[dict[str, Any]], str]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return [], "nvidia-smi is not on PATH (no NVIDIA driver here)."
    try:
        proc = subprocess.run(
            [exe, "topo", "-m"], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"nvidia-smi topo -m did not answer ({exc})."
    if proc.returncode != 0:
        return [], f"nvidia-smi topo -m failed: {proc.stderr.strip()[:120]}"
    return parse_nvidia_smi(proc.stdout), ""


def live_pairs() -> tuple[list[dict[str, Any]], str, str]:
    """This node's GPU pairs: NVML first, then nvidia-smi. Returns (pairs, source, note)."""
    pairs, note = from_nvml()
    if pairs:
        return pairs, "NVML", ""
    smi, smi_note = from_nvidia_smi()
    if smi:
        return smi, "nvidia-smi topo -m", ""
    return [], "", note if "installed" not in note else f"{note} {smi_note}"
