"""A machine's topology from hwloc's XML (chapter 02: PCIe topology & data movement).

hwloc (https://www.open-mpi.org/projects/hwloc/) already knows how to discover a machine:
packages, NUMA nodes, caches, cores, and the PCI tree with host bridges, bridges/switches and
devices, each with its link speed. ``lstopo --of xml`` writes that as XML, and ``lstopo --input
FILE.xml`` replays a machine from such a file. This module does not re-discover anything: it
asks ``lstopo`` for this node's XML (or reads a saved one) and flattens the tree into records,
one per object, with the fields the chapter draws and tabulates:

``id``, ``parent``, ``kind`` (machine, package, group, numa, cache, core, pu, hostbridge,
bridge, switch, gpu, nic, infiniband, storage, pci, nvswitch, osdev), ``name``, ``depth``,
``numa_node`` (the NUMA node whose memory and PCI root the object hangs on), ``package``,
``pci_busid``, ``pci_class``, ``vendor_id``, ``device_id``, ``link_gbps`` (hwloc's
``pci_link_speed``: GB/s per direction, encoding already taken off), ``cache_bytes``,
``memory_bytes``.

A PCI bridge with two or more bridges below it is the upstream port of a **switch** (the
downstream ports are its children), the way PLX/Broadcom switches appear to Linux.
"""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from hpclab.config import ConfigError

# PCI class codes (first two bytes of ``pci_type``) -> the course's kind of device.
PCI_CLASSES = {
    "0300": "gpu",  # VGA controller
    "0302": "gpu",  # 3D controller (datacenter GPUs)
    "0200": "nic",  # Ethernet
    "0207": "infiniband",
    "0108": "storage",  # NVMe
    "0106": "storage",  # SATA/AHCI
    "0101": "storage",  # IDE
    "0100": "storage",  # SCSI
    "0180": "storage",  # other mass storage (virtio-blk)
    "0280": "nic",  # other network controller
    "0c06": "infiniband",  # InfiniBand (serial bus class)
}
# Names for a few devices whose XML carries no model string.
PCI_NAMES = {("10de", "06d2"): "Tesla M2070", ("1002", "515e"): "ES1000 (on-board VGA)"}
GPU_VENDORS = {"10de": "NVIDIA", "1002": "AMD", "8086": "Intel"}
VIRTIO_VENDOR = "1af4"  # Red Hat / virtio: devices of a virtual machine
SWITCH_VENDORS = {"10b5": "PLX/Broadcom", "1000": "Broadcom", "111d": "Microchip/IDT"}
NVSWITCH_DEVICE_CLASSES = ("0680",)  # "other bridge" class on NVIDIA's vendor id

_CPU_KINDS = {"Machine": "machine", "Package": "package", "Group": "group", "NUMANode": "numa"}
_CACHES = ("L1Cache", "L2Cache", "L3Cache", "L4Cache", "L1iCache", "L2iCache")


@dataclass
class Topology:
    """One machine: flat object records, the NVLink matrix if the file has one, notes."""

    name: str
    source: str  # "this node (lstopo)", or the file it came from
    objects: list[dict[str, Any]]
    info: dict[str, str] = field(default_factory=dict)
    nvlink_gbps: dict[tuple[str, str], float] = field(default_factory=dict)  # gpu name pair
    notes: list[str] = field(default_factory=list)

    def of_kind(self, *kinds: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] in kinds]

    def by_id(self) -> dict[str, dict[str, Any]]:
        return {o["id"]: o for o in self.objects}

    def ancestors(self, obj: dict[str, Any]) -> list[dict[str, Any]]:
        """``obj``'s parents from the nearest up to the machine."""
        index, out = self.by_id(), []
        parent = obj["parent"]
        while parent is not None:
            out.append(index[parent])
            parent = index[parent]["parent"]
        return out

    def counts(self) -> dict[str, int]:
        """Objects per kind (the table's summary line)."""
        out: dict[str, int] = {}
        for o in self.objects:
            out[o["kind"]] = out.get(o["kind"], 0) + 1
        return out


# --- bundled machines ----------------------------------------------------------------------


def bundled_machines() -> dict[str, str]:
    """Bundled real-machine XMLs: name -> one-line description (see references/topology)."""
    return {
        "dgx2": "NVIDIA DGX-2H: 2 Xeon sockets, 16 V100 behind PCIe switches, NVSwitch",
        "power8-minsky": "IBM Minsky: 2 POWER8 sockets, 4 P100 with NVLink to CPU and pairs",
        "xeon-2s-3gpu-ib": "HP SL390s: 2 Westmere sockets, 3 GPUs, InfiniBand (a 2011 cluster node)",
    }


def machine_path(name: str) -> Path:
    """The XML of a bundled machine, or ``name`` itself when it is a path to a file."""
    if name in bundled_machines():
        return Path(str(resources.files("hpclab") / "references" / "topology" / f"{name}.xml"))
    path = Path(name).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"from_={name!r} (--from) is neither a bundled machine nor an XML file; allowed: this, "
            + ", ".join(bundled_machines())
            + ", or a path to an hwloc XML (lstopo --of xml > FILE.xml)"
        )
    return path


def lstopo_command() -> str | None:
    """``lstopo-no-graphics`` (Debian's hwloc-nox too) or ``lstopo``; None without hwloc."""
    return shutil.which("lstopo-no-graphics") or shutil.which("lstopo")


def this_node_xml(timeout_s: float = 30.0) -> str:
    """This node's topology as hwloc XML, from ``lstopo --of xml`` (RuntimeError without it)."""
    exe = lstopo_command()
    if exe is None:
        raise RuntimeError("hwloc's lstopo is not installed (Debian/Ubuntu: apt-get install hwloc)")
    proc = subprocess.run(
        [exe, "--of", "xml", "-"], capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if proc.returncode != 0 or "<topology" not in proc.stdout:
        raise RuntimeError(f"lstopo failed: {proc.stderr.strip().splitlines()[-1:]}")
    return proc.stdout


def replay_console(path: Path, timeout_s: float = 30.0) -> str:
    """``lstopo --input FILE.xml`` as text (hwloc replaying another machine), caches and
    hardware threads left out; '' without hwloc."""
    exe = lstopo_command()
    if exe is None:
        return ""
    proc = subprocess.run(
        [exe, "--input", str(path), "--of", "console", "--filter", "cache:none", "--no-smt"],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    return proc.stdout if proc.returncode == 0 else ""


# --- parsing -------------------------------------------------------------------------------


def _kind(elem: ET.Element, child_types: list[str]) -> str:
    t = elem.get("type", "")
    if t in _CPU_KINDS:
        return _CPU_KINDS[t]
    if t in _CACHES:
        return "cache"
    if t in ("Core", "PU"):
        return t.lower()
    if t == "Bridge":
        if elem.get("bridge_type", "").startswith("0-"):
            return "hostbridge"
        if sum(1 for c in child_types if c == "Bridge") >= 2:
            return "switch"
        return "bridge"
    if t == "PCIDev":
        pci_class = (elem.get("pci_type") or "").split(" ")[0]
        vendor = _ids(elem)[0]
        if elem.get("subtype") == "NVSwitch" or (
            vendor == "10de" and pci_class[:4] in NVSWITCH_DEVICE_CLASSES
        ):
            return "nvswitch"
        if pci_class[:4] == "0300" and vendor != "10de":
            return "display"  # a server's on-board VGA, not a compute GPU
        return PCI_CLASSES.get(pci_class[:4], "pci")
    if t == "OSDev":
        return "osdev"
    return t.lower() or "object"


def _ids(elem: ET.Element) -> tuple[str, str]:
    """(vendor, device) from hwloc's ``pci_type="0302 [10de:1db8] [10de:131d] a1"``."""
    parts = (elem.get("pci_type") or "").split(" ")
    if len(parts) > 1 and ":" in parts[1]:
        vendor, device = parts[1].strip("[]").split(":")
        return vendor.lower(), device.lower()
    return "", ""


def _name(elem: ET.Element, kind: str) -> str:
    infos = {i.get("name"): i.get("value") for i in elem.findall("info")}
    t = elem.get("type", "")
    if kind == "osdev":
        return elem.get("name", "osdev")
    if elem.get("pci_busid"):
        label = infos.get("PCIDevice") or PCI_NAMES.get(_ids(elem), "")
        for child in elem.findall("object"):
            model = {i.get("name"): i.get("value") for i in child.findall("info")}.get("GPUModel")
            label = label or model or ""
        return f"{kind} {elem.get('pci_busid')}" + (f" {label}" if label else "")
    if kind == "cache":
        return f"{t.replace('Cache', '')} {int(elem.get('cache_size', '0')) // 1024} KiB"
    if kind == "hostbridge":
        return f"hostbridge {elem.get('bridge_pci', '')}"
    if kind == "package":
        return f"package {elem.get('os_index', '')}" + (
            f" {infos['CPUModel']}" if "CPUModel" in infos else ""
        )
    if elem.get("os_index") is not None:
        return f"{kind} {elem.get('os_index')}"
    return kind


def parse_xml(text: str, name: str = "machine", source: str = "") -> Topology:
    """Flatten an hwloc XML document (format 2.x) into a :class:`Topology`."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise ConfigError(f"{source or name}: not an XML file ({exc})") from exc
    if root.tag != "topology":
        raise ConfigError(f"{source or name}: not an hwloc topology (root <{root.tag}>)")
    top = root.find("object")
    if top is None:
        raise ConfigError(f"{source or name}: the hwloc XML has no objects")
    objects: list[dict[str, Any]] = []
    gp_to_id: dict[str, str] = {}

    def walk(elem: ET.Element, parent: str | None, depth: int, numa: Any, package: Any) -> None:
        children = elem.findall("object")
        child_types = [c.get("type", "") for c in children]
        kind = _kind(elem, child_types)
        # hwloc 2 puts NUMA nodes beside the cores of their package/group: the first NUMA
        # child of an object is the memory (and the PCI root) of everything below it.
        numa_children = [c for c in children if c.get("type") == "NUMANode"]
        if numa_children:
            numa = int(numa_children[0].get("os_index", "0"))
        if kind == "package":
            package = int(elem.get("os_index", "0"))
        if kind == "numa":
            numa = int(elem.get("os_index", "0"))
        oid = f"o{len(objects)}"
        if elem.get("gp_index"):
            gp_to_id[elem.get("gp_index", "")] = oid
        objects.append(_record(elem, oid, parent, kind, depth, numa, package))
        for child in children:
            walk(child, oid, depth + 1, numa, package)

    walk(top, None, 0, 0, None)
    infos = {i.get("name", ""): i.get("value", "") for i in top.findall("info")}
    topo = Topology(name=name, source=source, objects=objects, info=infos)
    name_gpus(topo)
    topo.nvlink_gbps = _nvlink(root, topo, gp_to_id)
    return topo


def _record(
    elem: ET.Element, oid: str, parent: str | None, kind: str, depth: int, numa: Any, package: Any
) -> dict[str, Any]:
    """One hwloc object as a flat record: where it sits (parent, depth, NUMA node, package)
    and what hwloc says of it (PCI ids and link, cache and memory sizes)."""
    vendor, device = _ids(elem)
    link = elem.get("pci_link_speed")
    return {
        "id": oid,
        "parent": parent,
        "kind": kind,
        "hwloc_type": elem.get("type", ""),
        "name": _name(elem, kind),
        "depth": depth,
        "numa_node": numa,
        "package": package,
        "os_index": int(elem.get("os_index")) if elem.get("os_index") else None,
        "pci_busid": elem.get("pci_busid"),
        "pci_class": (elem.get("pci_type") or "").split(" ")[0] or None,
        "vendor_id": vendor or None,
        "device_id": device or None,
        "link_gbps": float(link) if link and float(link) > 0 else None,
        "cache_bytes": int(elem.get("cache_size")) if elem.get("cache_size") else None,
        "memory_bytes": int(elem.get("local_memory")) if elem.get("local_memory") else None,
    }


def name_gpus(topo: Topology) -> None:
    """Number GPUs gpu0, gpu1, ... in PCI order and keep the model from their OS device."""
    index = topo.by_id()
    for i, gpu in enumerate(topo.of_kind("gpu")):
        gpu["gpu_index"] = i
        gpu["label"] = f"GPU{i}"
    for o in topo.objects:
        if o["kind"] == "osdev" and index[o["parent"]]["kind"] == "gpu":
            o["label"] = index[o["parent"]]["label"] + f" ({o['name']})"


def _nvlink(root: ET.Element, topo: Topology, gp_to_id: dict[str, str]) -> dict:
    """hwloc's ``NVLinkBandwidth`` distances (MB/s between OS devices) -> GB/s by GPU label."""
    index = topo.by_id()
    out: dict[tuple[str, str], float] = {}
    for dist in root.iter():
        if not dist.tag.startswith("distances2") or dist.get("name") != "NVLinkBandwidth":
            continue
        idx = " ".join(e.text or "" for e in dist.findall("indexes")).split()
        values = " ".join(v.text or "" for v in dist.findall("u64values")).split()
        n = len(idx)
        labels = []
        for ref in idx:
            oid = gp_to_id.get(ref.split(":")[-1])
            obj = index.get(oid) if oid else None
            parent = index.get(obj["parent"]) if obj and obj["parent"] else None
            if obj and parent is not None and parent["kind"] == "gpu":
                labels.append(parent["label"])
            else:
                labels.append(obj["name"] if obj else ref)
        for i in range(n):
            for j in range(n):
                mbps = float(values[i * n + j]) if i * n + j < len(values) else 0.0
                if i != j and mbps > 0:
                    out[(labels[i], labels[j])] = mbps / 1000.0
    return out


def load(machine: str = "this") -> Topology:
    """``"this"`` (lstopo on this node) or a bundled machine's name or an XML file's path."""
    if machine == "this":
        return parse_xml(this_node_xml(), name="this node", source="lstopo --of xml")
    path = machine_path(machine)
    name = machine if machine in bundled_machines() else path.stem
    return parse_xml(path.read_text(), name=name, source=str(path))
