"""PCI links as Linux reports them in sysfs (chapter 02).

``/sys/bus/pci/devices/<address>/`` holds, for every PCI function, its ``class``, ``vendor``,
``numa_node`` and, on real PCIe hardware, ``current_link_speed`` ("16.0 GT/s PCIe"),
``current_link_width`` ("16") and their ``max_link_*`` twins. A GPU that trained its link at
x8 instead of x16, or at gen 3 in a gen 4 slot, shows here: the current values are lower
than the maximum ones. Virtual machines give their guests a flat, emulated bus (virtio devices,
vendor ``1af4``) without link files; this module says so instead of failing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hpclab.topology.hwloc import PCI_CLASSES, VIRTIO_VENDOR

SYSFS_PCI = Path("/sys/bus/pci/devices")
# "8.0 GT/s PCIe" -> generation (the transfer rate each generation introduced).
GT_PER_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:  # missing, or denied (containers)
        return None


def gen_from_speed(text: str | None) -> int | None:
    """``"16.0 GT/s PCIe"`` -> 4; None when unknown ("Unknown", "2.5 GT/s" -> 1)."""
    if not text:
        return None
    try:
        rate = float(text.split()[0])
    except (ValueError, IndexError):
        return None
    return GT_PER_GEN.get(rate)


def pci_devices(root: Path = SYSFS_PCI) -> list[dict[str, Any]]:
    """One record per PCI function: address, kind, vendor/device ids, NUMA node, link
    generation and width (current and max, None when the file is absent)."""
    if not root.is_dir():
        return []
    out = []
    for dev in sorted(root.iterdir()):
        pci_class = (_read(dev / "class") or "0x000000")[2:6]
        vendor = (_read(dev / "vendor") or "0x0000")[2:]
        numa = _read(dev / "numa_node")
        width = _read(dev / "current_link_width")
        max_width = _read(dev / "max_link_width")
        out.append(
            {
                "pci_busid": dev.name,
                "kind": "bridge"
                if pci_class.startswith("06")
                else PCI_CLASSES.get(pci_class, "pci"),
                "pci_class": pci_class,
                "vendor_id": vendor,
                "device_id": (_read(dev / "device") or "0x0000")[2:],
                "driver": os.path.basename(os.readlink(dev / "driver"))
                if (dev / "driver").is_symlink()
                else None,
                # -1 means "no NUMA information" (one node, or firmware did not say).
                "numa_node": int(numa) if numa and numa.isdigit() else None,
                "link_gen": gen_from_speed(_read(dev / "current_link_speed")),
                "link_width": int(width) if width and width.isdigit() and int(width) > 0 else None,
                "max_link_gen": gen_from_speed(_read(dev / "max_link_speed")),
                "max_link_width": int(max_width)
                if max_width and max_width.isdigit() and int(max_width) > 0
                else None,
                "has_link_files": (dev / "current_link_speed").exists(),
            }
        )
    return out


def describe(devices: list[dict[str, Any]]) -> str:
    """One or two plain sentences about what sysfs shows on this machine."""
    if not devices:
        return (
            "This system shows no PCI devices in /sys/bus/pci (not Linux, or a container hides it)."
        )
    virtio = sum(1 for d in devices if d["vendor_id"] == VIRTIO_VENDOR)
    with_links = [d for d in devices if d["link_width"]]
    parts = []
    if virtio:
        parts.append(
            f"This is a virtual machine: {virtio} of its {len(devices)} PCI devices are virtio "
            "devices on one flat emulated bus, so the host's real PCIe tree, switches and GPUs "
            "are invisible here."
        )
    if not with_links:
        parts.append(
            "No device has current_link_speed/current_link_width files, so no link generation "
            "or width can be read; the bundled real machines show what a GPU node looks like."
        )
    else:
        slow = [
            d["pci_busid"]
            for d in with_links
            if (d["max_link_width"] and d["link_width"] < d["max_link_width"])
            or (d["max_link_gen"] and d["link_gen"] and d["link_gen"] < d["max_link_gen"])
        ]
        parts.append(
            f"{len(with_links)} devices report their PCIe link"
            + (f"; running below their maximum: {', '.join(slow)}." if slow else ".")
        )
    return " ".join(parts)
