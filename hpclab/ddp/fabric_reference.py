"""The fabric model beside published nccl-tests figures (chapter 06, "Beyond the ring").

Model-tier records from :mod:`hpclab.ddp.fabric` and reference-tier records from
``fabric.PUBLISHED`` (each with its source and date), in one list, a table and a figure:
8xH100 on NVSwitch with a ring and with NVLS, and 2 nodes with 8 or 1 NICs each.
"""

from __future__ import annotations

from typing import Any

from hpclab.ddp.fabric import NODES, PUBLISHED, allreduce_cost, wire_from_busbw
from hpclab.display import figure

# The published peaks are for large messages (NVLS: above 256 MB); the model is read at 1 GiB.
AT_BYTES = 2**30
# (label, node preset, nodes, algorithm): the cases the chapter shows
CASES: tuple[tuple[str, str, int, str], ...] = (
    ("8xH100, ring", "dgx-h100", 1, "ring"),
    ("8xH100, NVLS", "dgx-h100", 1, "nvls"),
    ("2 nodes, 8 NICs each, ring", "dgx-h100", 2, "ring"),
    ("2 nodes, 8 NICs each, hierarchical", "dgx-h100", 2, "hierarchical"),
    ("2 nodes, 8 NICs each, NVLS + SHARP", "dgx-h100", 2, "nvls+sharp"),
    ("2 nodes, 1 NIC each, ring", "dgx-h100-1nic", 2, "ring"),
    ("2 nodes, 1 NIC each, hierarchical", "dgx-h100-1nic", 2, "hierarchical"),
)


def model_record(label: str, preset: str, nodes: int, algorithm: str, nbytes: float) -> dict:
    node = NODES[preset]
    cost = allreduce_cost(nbytes, node, nodes, algorithm)
    return {
        "tier": "model",
        "case": label,
        "node": preset,
        "nodes": nodes,
        "gpus": nodes * node.gpus,
        "nics_per_node": node.nics,
        "algorithm": algorithm,
        "bytes": nbytes,
        "seconds": cost.seconds,
        "algbw_gbps": cost.algbw_gbps,
        "busbw_gbps": cost.busbw_gbps,
        "wire_gbps": cost.wire_gbps,
        "bottleneck": cost.bottleneck,
        "source": node.source,
    }


def fabric_records(nbytes: float = AT_BYTES) -> list[dict[str, Any]]:
    """One model record per case at ``nbytes``, and the published figures (reference tier)."""
    rows = [model_record(*case, nbytes) for case in CASES]
    for ref in PUBLISHED:
        rows.append({"tier": "reference", "gpus": 8, **ref})
    return rows


def fabric_table(nbytes: float = AT_BYTES) -> Any:
    """Model and published busbw side by side (busbw as nccl-tests prints it: algbw x
    2(n-1)/n), with the link that sets the pace and what it carries per direction ("wire":
    the model's, and the published busbw read back by :func:`~hpclab.ddp.fabric.wire_from_busbw`)."""
    import pandas as pd

    from hpclab.display import readable

    records = fabric_records(nbytes)
    published = {r["case"]: r for r in records if r["tier"] == "reference"}
    rows = []
    for r in (x for x in records if x["tier"] == "model"):
        ref = published.get(r["case"], {})
        rows.append(
            {
                "case": r["case"],
                "GPUs": r["gpus"],
                "bottleneck": r["bottleneck"],
                "model algbw": r["algbw_gbps"],
                "model busbw": r["busbw_gbps"],
                "model wire": r["wire_gbps"],
                "published busbw": ref.get("busbw_gbps"),
                "published wire": (
                    wire_from_busbw(ref["busbw_gbps"], r["gpus"], r["algorithm"]) if ref else None
                ),
                "model / published": r["busbw_gbps"] / ref["busbw_gbps"] if ref else None,
            }
        )
    return readable(pd.DataFrame(rows).set_index("case"))


def curve(preset: str, nodes: int, algorithm: str, sizes: list[float]) -> list[dict]:
    return [model_record("", preset, nodes, algorithm, m) for m in sizes]


@figure
def plot_fabric(records: Any = None):
    """busbw (as nccl-tests prints it) against message size for each case (model lines), with
    the reference records of ``records`` (default: :func:`fabric_records`) drawn where they
    were measured (dashed)."""
    import plotly.graph_objects as go

    records = fabric_records() if records is None else records

    sizes = [float(2**k) for k in range(12, 34)]  # 4 KiB .. 8 GiB
    fig = go.Figure()
    for label, preset, nodes, algorithm in CASES:
        rows = curve(preset, nodes, algorithm, sizes)
        fig.add_scatter(
            x=sizes,
            y=[r["busbw_gbps"] for r in rows],
            mode="lines",
            name=f"model: {label}",
            hovertext=[r["bottleneck"] for r in rows],
        )
    for ref in (r for r in records if r["tier"] == "reference"):
        lo = ref.get("min_bytes", 2**28)
        fig.add_scatter(
            x=[lo, sizes[-1]],
            y=[ref["busbw_gbps"]] * 2,
            mode="lines+markers",
            line={"dash": "dash", "width": 3},
            name=f"reference: {ref['case']}, {ref['busbw_gbps']:.0f} GB/s",
            hovertext=[ref["source"]] * 2,
        )
    fig.update_xaxes(type="log", title="message bytes")
    fig.update_yaxes(type="log", title="busbw, GB/s (algbw x 2(n-1)/n, as nccl-tests prints)")
    fig.update_layout(
        title="All-reduce on real fabrics: the model (lines) and nccl-tests on 8xH100 (dashed)",
        height=460,
    )
    return fig


def affinity_rails(machine: str = "xeon-2s-3gpu-ib", nic: str = "ib-ndr") -> Any:
    """Chapter 02's topology meets the model: for each GPU of a bundled (or saved) hwloc
    machine, its nearest NIC, the path, how many GPUs share that NIC, and the network bandwidth
    its rail would get with ``nic`` ports (model: a NIC shared by k GPUs gives each 1/k)."""
    import pandas as pd

    from hpclab.ddp.fabric import Node
    from hpclab.display import readable
    from hpclab.topology.hwloc import load
    from hpclab.topology.nic_affinity import nearest_nics

    rows = nearest_nics(load(machine))
    if not rows:
        return None
    for r in rows:
        shared = Node(gpus=r["gpus_on_nic"], nics=1, nic=nic, fabric="pcie", link="pcie3")
        r[f"rail_gbps ({nic}, model)"] = shared.rail_gbps()
    cols = ["gpu", "gpu_numa", "nic", "nic_numa", "path", "why", "gpus_on_nic"]
    return readable(pd.DataFrame(rows)[[*cols, f"rail_gbps ({nic}, model)"]].set_index("gpu"))
