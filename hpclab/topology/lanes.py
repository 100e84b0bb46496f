"""Experiment ``lanes`` (chapter 02): the PCIe lanes arithmetic, a model with its sources.

One direction of a PCIe link carries ``transfer rate (GT/s) x lanes x encoding efficiency / 8``
GB/s. Generations 1-2 encode 8 bits in 10 (80 %), generations 3-5 128 in 130 (98.5 %),
generation 6 sends 256-byte FLITs of which 242 bytes are payload (PCI-SIG specifications).
The link is full duplex: gen 4 x16 carries ~31.5 GB/s (the usual "32 GB/s") in each direction at
once; datasheets often add both directions (A100 "PCIe Gen4: 64 GB/s", H100 "PCIe Gen5: 128
GB/s"), and a copy in one direction gets half of such a figure.

Nakayama 2017 teaches the lane budget: one lane of gen 3 gives about 1 GB/s ("x1 = 500 MB/s one
way" is gen 2's figure), x16 about 16 GB/s; a 40-lane Xeon fits only two x16 GPUs; two sockets
give 80 lanes and four GPUs, joined by QPI; a board with PCIe switches carries eight GPUs,
sharing each switch's uplink. Mao 2015 draws such a node (SHARCNET's Monk): about 6 GB/s
through the PCIe switch and 5 GB/s over InfiniBand.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hpclab.config import Config, param
from hpclab.display import figure
from hpclab.progress import Progress
from hpclab.results import Result, make_result

# gen -> (GT/s per lane, encoding efficiency). Source: PCI-SIG base specifications 1.0-6.0.
PCIE = {
    1: (2.5, 8 / 10),
    2: (5.0, 8 / 10),
    3: (8.0, 128 / 130),
    4: (16.0, 128 / 130),
    5: (32.0, 128 / 130),
    6: (64.0, 242 / 256),
}
WIDTHS = (1, 2, 4, 8, 16)
PCIE_SOURCE = "PCI-SIG PCI Express base specifications 1.0-6.0 (rate and encoding)"
# Per-GPU NVLink bandwidth, both directions added, from NVIDIA's datasheets.
NVLINK = {
    "NVLink 1 (P100)": 160.0,
    "NVLink 2 (V100)": 300.0,
    "NVLink 3 (A100)": 600.0,
    "NVLink 4 (H100)": 900.0,
    "NVLink 5 (B200)": 1800.0,
}
# InfiniBand 4x ports: (Gb/s, fraction that is data). Source: InfiniBand Trade Association roadmap.
# QDR and FDR are named by their signalling rate (8b/10b, 64b/66b); from EDR on the name is the
# data rate already (EDR signals 4 x 25.78125 Gb/s = 103.125 with 64b/66b, giving 100).
INFINIBAND = {
    "QDR 4x": (40.0, 8 / 10),
    "FDR 4x": (56.25, 64 / 66),
    "EDR 4x": (100.0, 1.0),
    "HDR 4x": (200.0, 1.0),
    "NDR 4x": (400.0, 1.0),
    "XDR 4x": (800.0, 1.0),
}


def pcie_gbps(gen: int, width: int) -> float:
    """GB/s in one direction of a PCIe link (1 GB = 1e9 bytes; protocol headers not counted)."""
    rate, efficiency = PCIE[gen]
    return rate * width * efficiency / 8.0


def lane_budget(
    gpus: int,
    cpu_lanes: int = 40,
    sockets: int = 1,
    gen: int = 3,
    gpu_width: int = 16,
    gpus_per_switch: int = 1,
) -> dict[str, Any]:
    """What a node's lanes give each GPU, with every GPU copying to the host at once.

    GPUs are spread evenly over the sockets; ``gpus_per_switch > 1`` puts them behind PCIe
    switches whose x16 uplink they share. Returns lanes needed and available, whether the GPUs
    fit at full width, and GB/s per GPU to the host (one direction).
    """
    slots = math.ceil(gpus / gpus_per_switch)  # x16 links the CPUs must provide
    lanes_needed = slots * gpu_width
    lanes = cpu_lanes * sockets
    # Without switches, lanes beyond the budget are not there: the board splits slots to x8.
    width = gpu_width
    while slots * width > lanes and width > 1:
        width //= 2
    per_slot = pcie_gbps(gen, width)
    per_gpu = per_slot / min(gpus, gpus_per_switch)
    return {
        "gpus": gpus,
        "sockets": sockets,
        "cpu_lanes": lanes,
        "lanes_needed": lanes_needed,
        "fits_full_width": lanes_needed <= lanes,
        "slot_width": width,
        "gpus_per_switch": gpus_per_switch,
        "host_gbps_per_gpu": per_gpu,
        "host_gbps_total": per_slot * slots,
        "pair_within_switch_gbps": pcie_gbps(gen, gpu_width) if gpus_per_switch > 1 else None,
    }


# Nakayama 2017's four boards, plus Mao 2015's Monk, as lane_budget arguments.
SCENARIOS = {
    "1 CPU, 2 GPUs": dict(gpus=2, cpu_lanes=40, sockets=1),
    "1 CPU, 4 GPUs": dict(gpus=4, cpu_lanes=40, sockets=1),
    "2 CPUs, 4 GPUs": dict(gpus=4, cpu_lanes=40, sockets=2),
    "2 CPUs, 8 GPUs, switches": dict(gpus=8, cpu_lanes=40, sockets=2, gpus_per_switch=2),
}


@dataclass(frozen=True)
class LanesConfig(Config):
    gen: int = param(3, min=1, max=6, help="PCIe generation for the lane-budget scenarios")
    width: int = param(16, choices=WIDTHS, help="lanes per GPU slot")
    gpus: int = param(8, min=1, max=64, help="GPUs in the what-if node")
    cpu_lanes: int = param(40, min=16, max=160, help="PCIe lanes per CPU socket")
    sockets: int = param(2, min=1, max=8, help="CPU sockets")
    gpus_per_switch: int = param(1, min=1, max=16, help="GPUs sharing one switch uplink (1 = none)")


def run_lanes(config: LanesConfig, progress: Progress) -> Result:
    records = link_records() + budget_records(config) + reference_records()
    progress.update(1, 1, "done")
    return make_result("lanes", config, records)


def link_records() -> list[dict[str, Any]]:
    """Each link's bandwidth, one way and both ways: PCIe by generation and width, NVLink per
    GPU, InfiniBand per 4x port."""
    records: list[dict[str, Any]] = []
    for gen in PCIE:
        for width in WIDTHS:
            records.append(
                {
                    "tier": "model",
                    "table": "pcie",
                    "link": f"PCIe {gen}.0 x{width}",
                    "gen": gen,
                    "width": width,
                    "gt_per_s": PCIE[gen][0],
                    "encoding": PCIE[gen][1],
                    "gbps_one_way": pcie_gbps(gen, width),
                    "gbps_both_ways": 2 * pcie_gbps(gen, width),
                    "source": PCIE_SOURCE,
                }
            )
    for name, both in NVLINK.items():
        records.append(
            {
                "tier": "model",
                "table": "nvlink",
                "link": name,
                "gbps_one_way": both / 2,
                "gbps_both_ways": both,
                "source": "NVIDIA P100/V100/A100/H100/B200 datasheets (per GPU)",
            }
        )
    for name, (gbit, eff) in INFINIBAND.items():
        records.append(
            {
                "tier": "model",
                "table": "infiniband",
                "link": name,
                "gbps_one_way": gbit * eff / 8,
                "gbps_both_ways": 2 * gbit * eff / 8,
                "source": "InfiniBand Trade Association (4x port data rate)",
            }
        )
    return records


def budget_records(config: LanesConfig) -> list[dict[str, Any]]:
    """The lane budget of each node of the lectures, and of the what-if node of ``config``."""
    records: list[dict[str, Any]] = []
    scenarios = dict(SCENARIOS)
    scenarios["what-if"] = dict(
        gpus=config.gpus,
        cpu_lanes=config.cpu_lanes,
        sockets=config.sockets,
        gpus_per_switch=config.gpus_per_switch,
    )
    for name, kwargs in scenarios.items():
        records.append(
            {
                "tier": "model",
                "table": "budget",
                "link": name,
                "gen": config.gen,
                **lane_budget(gen=config.gen, gpu_width=config.width, **kwargs),
                "source": "Nakayama 2017 (lane budget)" if name != "what-if" else "your inputs",
            }
        )
    return records


def reference_records() -> list[dict[str, Any]]:
    """The lectures' figures, each with its source."""
    return [
        {
            "tier": "reference",
            "table": "lecture",
            "link": "x1 lane, one way (lecture)",
            "gbps_one_way": 0.5,
            "source": "Nakayama 2017 (500 MB/s one way: PCIe 2.0's rate)",
        },
        {
            "tier": "reference",
            "table": "lecture",
            "link": "x16, one way (lecture)",
            "gbps_one_way": 16.0,
            "source": "Nakayama 2017 (x16 = 16 GB/s)",
        },
        {
            "tier": "reference",
            "table": "lecture",
            "link": "Monk PCIe switch (Mao 2015)",
            "gbps_one_way": 6.0,
            "source": "Mao 2015 (Monk node: ~6 GB/s through the PCIe switch)",
        },
        {
            "tier": "reference",
            "table": "lecture",
            "link": "Monk InfiniBand (Mao 2015)",
            "gbps_one_way": 5.0,
            "source": "Mao 2015 (Monk cluster: ~5 GB/s over InfiniBand)",
        },
    ]


@figure
def plot_lanes(result: Result):
    """GB/s one way by generation (a line per width), links and lecture figures beside it."""
    from plotly.subplots import make_subplots

    recs = result.records
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.4, 0.6],
        horizontal_spacing=0.25,
        subplot_titles=("PCIe, one direction (model)", "links, lane budgets, lectures' figures"),
    )
    for width in WIDTHS:
        rows = [r for r in recs if r.get("table") == "pcie" and r["width"] == width]
        fig.add_scatter(
            x=[r["gen"] for r in rows],
            y=[r["gbps_one_way"] for r in rows],
            mode="lines+markers",
            name=f"x{width}",
            row=1,
            col=1,
        )
    others = [r for r in recs if r.get("table") in ("nvlink", "infiniband", "lecture")]
    budget = [r for r in recs if r.get("table") == "budget"]
    colors = {"reference": "#aaa", "model": "#1f77b4"}
    fig.add_bar(
        y=[r["link"] for r in others] + [f"{r['link']}: per GPU" for r in budget],
        x=[r["gbps_one_way"] for r in others] + [r["host_gbps_per_gpu"] for r in budget],
        orientation="h",
        marker={
            "color": [colors[r["tier"]] for r in others]
            + ["#ff7f0e" if r["link"] == "what-if" else "#fdae6b" for r in budget]
        },
        hovertext=[r["source"] for r in others]
        + [
            f"{r['gpus']} GPUs on {r['cpu_lanes']} lanes: x{r['slot_width']} slots, "
            f"{r['gpus_per_switch']} per switch uplink (all copying at once)"
            for r in budget
        ],
        name="GB/s one way (grey: the lectures' figures; orange: lane budgets)",
        row=1,
        col=2,
    )
    fig.update_yaxes(type="log", title="GB/s", row=1, col=1)
    fig.update_xaxes(title="PCIe generation", dtick=1, row=1, col=1)
    fig.update_xaxes(type="log", title="GB/s one way", row=1, col=2)
    fig.update_layout(
        height=560,
        title="Lanes arithmetic: rate x lanes x encoding / 8",
        legend={"orientation": "h", "y": -0.15},
    )
    return fig
