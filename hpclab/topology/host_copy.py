"""Experiment ``host-copy`` (chapter 02): bandwidthTest-style copies over sizes.

On a GPU: host-to-device (``h2d``), device-to-host (``d2h``) and both at once, from pageable and
from pinned host memory, beside the link's spec read from sysfs. Everywhere (and the only live
part on a CPU-only node): host memory copies over sizes from 4 KiB (in cache) to hundreds of
MiB (main memory), into a warm buffer, a first-touch buffer (page faults) and an ``mlock``ed one,
on one thread and on all usable cores. Published figures sit beside them as the reference tier:
Mao 2015's Monk (~6 GB/s through its PCIe switch) and a PCIe 5 x16 host's ~55 GB/s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from hpclab.compute import device as dev
from hpclab.config import Config, ConfigError, param
from hpclab.display import figure
from hpclab.dist.placement import DEVICES, place
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.topology import copies, lanes, sysfs

HOST_MEMORY = ("warm", "first-touch", "locked")
GPU_MEMORY = ("pageable", "pinned")
DIRECTIONS = ("h2d", "d2h", "both")
REFERENCES = [
    {
        "memory": "pinned",
        "direction": "h2d",
        "link": "PCIe 3.0 x16 behind a PCIe switch (Monk)",
        "gbps": 6.0,
        "spec_gbps": lanes.pcie_gbps(3, 16),
        "source": "Mao 2015 (SHARCNET's Monk node: ~6 GB/s through the PCIe switch)",
    },
    {
        "memory": "pinned",
        "direction": "h2d",
        "link": "PCIe 5.0 x16 (H100 host)",
        "gbps": 55.6,
        "spec_gbps": lanes.pcie_gbps(5, 16),
        "source": "NVIDIA NVbandwidth blog (host_to_device_memcpy_ce, 1 GiB: 55.6 GB/s)",
    },
]


def references() -> list[dict[str, Any]]:
    """The published figures above and this course's own H200 run (pinned and pageable)."""
    from hpclab.results import load_reference

    ours = [
        {
            "memory": r["memory"],
            "direction": "h2d",
            "link": f"PCIe 5.0 x16 (H200 node, {r['memory']})",
            "gbps": r["gbps"],
            "spec_gbps": lanes.pcie_gbps(5, 16),
            "bytes": r["bytes"],
            "source": f"{r['source']}, 256 MiB copies",
        }
        for r in load_reference("h200_host_copy").records
    ]
    return [{"bytes": 2**30, **r} for r in REFERENCES] + ours


@dataclass(frozen=True)
class HostCopyConfig(Config):
    device: str = param("auto", choices=DEVICES, help="auto (GPU 0 if any, else cpu), cpu or cuda")
    sizes_kib: tuple = param(
        (4, 64, 1024, 16384, 65536, 262144),
        min=1,
        max=2**30,
        quick=(4, 1024, 16384),
        help="copy sizes in KiB (refused when three buffers of the largest do not fit)",
    )
    memory: tuple = param(
        HOST_MEMORY + GPU_MEMORY,
        choices=HOST_MEMORY + GPU_MEMORY,
        help="host kinds: warm, first-touch, locked; GPU copies: pageable, pinned",
    )
    direction: tuple = param(("h2d", "d2h"), choices=DIRECTIONS, help="GPU copy directions")
    threads: tuple = param((1,), min=0, max=1024, help="CPU threads for host copies (0 = all)")
    repeat: int = param(10, min=3, max=1000, quick=5, help="timed repeats per point")
    references: bool = param(True, help="add published H2D figures (reference tier)")

    def check(self) -> None:
        if not self.sizes_kib:
            raise ConfigError("sizes_kib=() is empty; give at least one size in 1..4194304 KiB")
        place(1, self.device)  # the one device policy: refuses 'cuda' where no GPU is visible


def resolve(device: str) -> str:
    """The device one process gets (:func:`hpclab.dist.place`): ``cuda:0`` or ``cpu``."""
    return place(1, device).devices[0]


def link_of(device: str) -> dict[str, Any]:
    """The PCIe link of a GPU from sysfs: gen, width and its spec GB/s (empty when unknown)."""
    props = torch.cuda.get_device_properties(torch.device(device))
    bus = getattr(props, "pci_bus_id", None)
    domain = getattr(props, "pci_domain_id", 0)
    slot = getattr(props, "pci_device_id", 0)
    if bus is None:
        return {}
    busid = f"{domain:04x}:{bus:02x}:{slot:02x}.0"
    for d in sysfs.pci_devices():
        if d["pci_busid"] == busid and d["link_gen"] and d["link_width"]:
            # Idle GPUs lower their link speed to save power: the maximum is what a copy gets.
            gen = max(d["link_gen"], d["max_link_gen"] or 0)
            return {
                "pci_busid": busid,
                "link_gen": gen,
                "link_width": d["link_width"],
                "spec_gbps": lanes.pcie_gbps(gen, d["link_width"]),
            }
    return {"pci_busid": busid}


def run_host_copy(config: HostCopyConfig, progress: Progress) -> Result:
    device = resolve(config.device)
    sizes = [k * 1024 for k in config.sizes_kib]
    biggest = max(sizes)
    dev.ensure_fits(3 * biggest, "cpu", f"three {biggest >> 20} MiB host buffers")
    host_kinds = [m for m in config.memory if m in HOST_MEMORY]
    gpu_kinds = [m for m in config.memory if m in GPU_MEMORY] if device != "cpu" else []
    if device != "cpu":
        dev.ensure_fits(2 * biggest, device, f"two {biggest >> 20} MiB device buffers")
    plan: list[tuple[str, ...]] = [
        ("host", m, str(t), "") for t in config.threads for m in host_kinds
    ] + [("gpu", m, "", d) for m in gpu_kinds for d in config.direction]
    total = len(plan) * len(sizes)
    records: list[dict[str, Any]] = []
    link = link_of(device) if device != "cpu" else {}
    ok, why = copies.pinned_available()
    step = 0
    for where, memory, threads, direction in plan:
        if memory == "pinned" and not ok:
            records.append({"tier": "live", "memory": memory, "note": why, "device": device})
            step += len(sizes)
            continue
        for nbytes in sizes:
            progress.update(step, total, f"{memory} {direction or 'host'} {nbytes >> 10} KiB")
            step += 1
            if where == "host":
                with dev.torch_threads(int(threads)) as used:
                    timing, note = copies.host_copy(nbytes, memory, config.repeat)
                rec = {"device": "cpu", "direction": "host", "threads": used, "note": note}
            else:
                timing = copies.gpu_copy(nbytes, memory, direction, device, config.repeat)
                moved = 2 * nbytes if direction == "both" else nbytes
                rec = {"device": device, "direction": direction, "threads": None, **link}
                rec["spec_fraction"] = (
                    moved
                    / timing.median_s
                    / 1e9
                    / (link["spec_gbps"] * (2 if direction == "both" else 1))
                    if link.get("spec_gbps")
                    else None
                )
            moved = 2 * nbytes if direction == "both" else nbytes
            records.append(
                {
                    "tier": "live",
                    "memory": memory,
                    "bytes": nbytes,
                    **rec,
                    "gbps": moved / timing.median_s / 1e9,
                    "gbps_best": moved / timing.min_s / 1e9,
                    **timing.summary(),
                }
            )
    if device == "cpu" and any(m in GPU_MEMORY for m in config.memory):
        records.append({"tier": "live", "memory": "pageable/pinned", "device": "cpu", "note": why})
    if config.references:
        records += [{"tier": "reference", **r} for r in references()]
    progress.update(total, total, "done")
    return make_result("host-copy", config, records)


@figure
def plot_host_copy(result: Result):
    """GB/s vs copy size, one line per memory kind x direction x threads; references dashed."""
    import plotly.graph_objects as go

    fig = go.Figure()
    live = [r for r in result.records if r.get("tier") == "live" and r.get("gbps")]
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in live:
        if r["device"] == "cpu":
            key = f"host {r['memory']}, {r['threads']} thread(s)"
        else:
            key = f"{r['memory']} {r['direction']}"
        groups.setdefault(key, []).append(r)
    for key, rows in groups.items():
        rows.sort(key=lambda r: r["bytes"])
        fig.add_scatter(
            x=[r["bytes"] for r in rows],
            y=[r["gbps"] for r in rows],
            mode="lines+markers",
            name=key + " (live)",
        )
    # Published figures and the link's spec as flat dashed lines across the measured sizes.
    xs = [r["bytes"] for r in live] or [4096, 2**30]
    span = [min(xs), max(xs)]
    for r in result.records:
        if r.get("tier") == "reference":
            fig.add_scatter(
                x=span,
                y=[r["gbps"]] * 2,
                mode="lines",
                line={"dash": "dash", "color": "#888"},
                name=f"{r['link']}: {r['gbps']:g} GB/s ({r['source'].split(' (')[0]}, reference)",
            )
    spec = next((r.get("spec_gbps") for r in live if r.get("spec_gbps")), None)
    if spec:
        fig.add_scatter(
            x=span, y=[spec] * 2, mode="lines", line={"color": "#2ca02c"}, name="this link's spec"
        )
    fig.update_layout(
        title="Copy bandwidth vs size (bytes copied per second, median)",
        xaxis={"type": "log", "title": "bytes per copy"},
        yaxis={"type": "log", "title": "GB/s"},
        height=460,
        legend={"orientation": "h", "y": -0.2},
    )
    return fig
