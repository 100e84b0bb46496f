"""Draw a topology as a plotly tree, and its GPU pairs as a matrix (chapter 02).

The tree is hwloc's: machine -> packages (with their NUMA node and cores) -> host bridges ->
switches -> devices. ``detail="io"`` hides caches, hardware threads, OS devices and plain
bridges (the downstream ports of a switch), which is what a person reading the PCIe tree wants;
``detail="full"`` keeps every object. Edge width grows with the link's GB/s.
"""

from __future__ import annotations

from typing import Any

from hpclab.topology.hwloc import Topology

HIDDEN_IN_IO = {"cache", "pu", "osdev", "bridge", "core"}
COLORS = {
    "machine": "#444",
    "package": "#1f77b4",
    "group": "#6baed6",
    "numa": "#9ecae1",
    "core": "#c6dbef",
    "hostbridge": "#ff7f0e",
    "switch": "#d62728",
    "bridge": "#fdae6b",
    "gpu": "#2ca02c",
    "nvswitch": "#98df8a",
    "nic": "#9467bd",
    "infiniband": "#8c564b",
    "storage": "#7f7f7f",
}
LINK_COLORS = {"NV": "#2ca02c", "PIX": "#98df8a", "PXB": "#ffdd71", "PHB": "#fdae6b"}
LINK_COLORS.update({"NODE": "#f16913", "SYS": "#d62728", "X": "#ffffff"})


def visible(topo: Topology, detail: str = "io") -> list[dict[str, Any]]:
    """The objects drawn, each with ``shown_parent`` (nearest drawn ancestor)."""
    keep = [o for o in topo.objects if detail == "full" or o["kind"] not in HIDDEN_IN_IO]
    kept_ids = {o["id"] for o in keep}
    index = topo.by_id()
    cores: dict[str, int] = {}
    for o in topo.of_kind("core"):
        anc = next((a for a in topo.ancestors(o) if a["id"] in kept_ids), None)
        if anc is not None:
            cores[anc["id"]] = cores.get(anc["id"], 0) + 1
    out = []
    for o in keep:
        parent = o["parent"]
        while parent is not None and parent not in kept_ids:
            parent = index[parent]["parent"]
        label = o.get("label") or o["name"]
        if detail != "full" and cores.get(o["id"]) and o["kind"] in ("package", "machine", "group"):
            label += f" ({cores[o['id']]} cores)"
        out.append({**o, "shown_parent": parent, "shown_label": label})
    return out


def _layout(nodes: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Leaves spread left to right in tree order, each parent centred over its children."""
    children: dict[str | None, list[str]] = {}
    for n in nodes:
        children.setdefault(n["shown_parent"], []).append(n["id"])
    pos: dict[str, tuple[float, float]] = {}
    next_x = [0.0]

    def place(nid: str, depth: int) -> float:
        kids = children.get(nid, [])
        if not kids:
            x = next_x[0]
            next_x[0] += 1.0
        else:
            xs = [place(k, depth + 1) for k in kids]
            x = (min(xs) + max(xs)) / 2
        pos[nid] = (x, -depth)
        return x

    for root in children.get(None, []):
        place(root, 0)
    return pos


def plot_tree(topo: Topology, detail: str = "io", title: str | None = None):
    """The topology as a tree: colour = kind, edge width = link GB/s (hover for details)."""
    import plotly.graph_objects as go

    nodes = visible(topo, detail)
    pos = _layout(nodes)
    fig = go.Figure()
    # Edges grouped by width so each group is one trace (fast to draw).
    groups: dict[float, tuple[list, list]] = {}
    for n in nodes:
        if n["shown_parent"] is None or n["shown_parent"] not in pos:
            continue
        gbps = n.get("link_gbps") or 0.0
        width = 1.0 if gbps <= 0 else min(6.0, 1.0 + gbps / 4.0)
        xs, ys = groups.setdefault(round(width, 1), ([], []))
        (x0, y0), (x1, y1) = pos[n["shown_parent"]], pos[n["id"]]
        xs += [x0, x1, None]
        ys += [y0, y1, None]
    for width, (xs, ys) in sorted(groups.items()):
        fig.add_scatter(
            x=xs,
            y=ys,
            mode="lines",
            line={"width": width, "color": "#999"},
            hoverinfo="skip",
            showlegend=False,
        )
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for n in nodes:
        by_kind.setdefault(n["kind"], []).append(n)
    for kind, items in by_kind.items():
        fig.add_scatter(
            x=[pos[n["id"]][0] for n in items],
            y=[pos[n["id"]][1] for n in items],
            mode="markers+text" if kind in ("gpu", "package", "numa", "machine") else "markers",
            marker={"size": 12, "color": COLORS.get(kind, "#bbb"), "line": {"width": 1}},
            text=[_short(n) for n in items],
            textposition="bottom center",
            textfont={"size": 9},
            hovertext=[_hover(n) for n in items],
            hoverinfo="text",
            name=kind,
        )
    fig.update_layout(
        title=title or f"{topo.name}: hwloc topology (edge width = PCIe link GB/s)",
        xaxis={"visible": False},
        yaxis={"visible": False},
        height=460,
        margin={"l": 10, "r": 10, "t": 50, "b": 10},
        legend={"orientation": "h", "y": -0.02},
    )
    return fig


def _short(n: dict[str, Any]) -> str:
    if n["kind"] == "gpu":
        return n.get("label", "GPU")
    if n["kind"] == "numa":
        gib = (n.get("memory_bytes") or 0) / 2**30
        return f"NUMA {n.get('os_index')}" + (f" {gib:.0f} GiB" if gib else "")
    if n["kind"] == "package":
        return n["shown_label"].split(" ")[0] + f" {n.get('os_index')}"
    return n["kind"]


def _hover(n: dict[str, Any]) -> str:
    parts = [n["shown_label"], f"kind: {n['kind']}", f"NUMA node: {n['numa_node']}"]
    if n.get("link_gbps"):
        parts.append(f"link: {n['link_gbps']:.2f} GB/s per direction")
    if n.get("cache_bytes"):
        parts.append(f"cache: {n['cache_bytes'] // 1024} KiB")
    return "<br>".join(parts)


def plot_matrix(pairs: list[dict[str, Any]], title: str = "GPU pairs"):
    """The GPU-pair matrix as a heatmap: colour = PCIe path, text = link (NV·PXB when both)."""
    import plotly.graph_objects as go

    from hpclab.topology.gpu_pairs import LEVELS, gpu_sort_key

    labels = sorted({p["gpu_a"] for p in pairs} | {p["gpu_b"] for p in pairs}, key=gpu_sort_key)
    cell = {}
    for p in pairs:
        text = p["link"] if p["link"] == p["pcie_path"] else f"{p['link']}·{p['pcie_path']}"
        cell[(p["gpu_a"], p["gpu_b"])] = cell[(p["gpu_b"], p["gpu_a"])] = (p["pcie_path"], text)
    order = {lvl: i for i, lvl in enumerate(LEVELS)}
    z = [
        [None if a == b else order.get(cell.get((a, b), ("?", ""))[0]) for b in labels]
        for a in labels
    ]
    text = [[("X" if a == b else cell.get((a, b), ("?", "?"))[1]) for b in labels] for a in labels]
    scale = [[i / (len(LEVELS) - 1), LINK_COLORS[lvl]] for i, lvl in enumerate(LEVELS)]
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=labels,
            y=labels,
            text=text,
            texttemplate="%{text}",
            colorscale=scale,
            zmin=0,
            zmax=len(LEVELS) - 1,
            showscale=False,
            hovertemplate="%{y} ↔ %{x}: %{text}<extra></extra>",
        )
    )
    fig.update_layout(
        title=title, yaxis={"autorange": "reversed"}, height=120 + 28 * len(labels), width=None
    )
    return fig
