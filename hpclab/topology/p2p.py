"""Experiment ``p2p`` (chapter 02): GPU-to-GPU copies, direct (P2P) vs staged through the host.

Mao 2015 contrasts the two ways to move a buffer from GPU 0 to GPU 1: without P2P the data go
to host memory and back (two copies over PCIe, ``cudaMemcpy`` twice); with GPUDirect P2P
(``cudaMemcpyPeer``) they cross the PCIe switch, or NVLink, once. torch's ``b.copy_(a)`` between
two GPUs uses P2P when the pair allows it (``torch.cuda.can_device_access_peer``; ACS or an
IOMMU on the path, or a pair crossing the sockets, often forbids it).

With two or more GPUs, every ordered pair is measured both ways and the matrix plotted.
With fewer, the experiment says so in one sentence, and the same lesson is measured between two
CPU processes (:mod:`hpclab.topology.process_copy`): shared memory vs gloo send/recv vs a
pickled object, i.e. one hop vs going through extra buffers.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations
from typing import Any

import torch

from hpclab.compute import device as dev
from hpclab.config import Config, param
from hpclab.display import figure
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.topology import copies, process_copy


@dataclass(frozen=True)
class P2PConfig(Config):
    size_mib: int = param(256, min=1, max=8192, quick=16, help="MiB per copy")
    repeat: int = param(10, min=3, max=1000, quick=5, help="timed repeats per pair")
    processes: bool = param(True, help="also move the bytes between two CPU processes")


def run_p2p(config: P2PConfig, progress: Progress) -> Result:
    n = dev.gpu_count()
    records: list[dict[str, Any]] = []
    nbytes = config.size_mib * 2**20
    if n < 2:
        records.append(
            {
                "tier": "live",
                "record": "note",
                "gpus": n,
                "note": f"GPU-to-GPU copies need two GPUs; this machine has {n}. "
                "Read the GPU pairs of a real machine with `hpclab run topology --from dgx2`.",
            }
        )
    pairs = list(permutations(range(n), 2))
    for i, (a, b) in enumerate(pairs):
        src, dst = f"cuda:{a}", f"cuda:{b}"
        dev.ensure_fits(nbytes, src, f"{config.size_mib} MiB")
        dev.ensure_fits(nbytes, dst, f"{config.size_mib} MiB")
        peer = torch.cuda.can_device_access_peer(a, b)
        for via_host in (False, True):
            progress.update(2 * i + via_host, 2 * len(pairs), f"{src} -> {dst}")
            t = copies.peer_copy(nbytes, src, dst, via_host, config.repeat)
            records.append(
                {
                    "tier": "live",
                    "record": "copy",
                    "src": src,
                    "dst": dst,
                    "bytes": nbytes,
                    "path": "via host" if via_host else ("P2P" if peer else "direct (no P2P)"),
                    "p2p_allowed": peer,
                    "gbps": nbytes / t.median_s / 1e9,
                    **t.summary(),
                }
            )
    if config.processes:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            records.append(
                {
                    "tier": "live",
                    "record": "note",
                    "note": "The two-process copies need a fresh kernel: CUDA is initialised "
                    "here and does not survive fork.",
                }
            )
        else:
            dev.ensure_fits(4 * nbytes, "cpu", f"{config.size_mib} MiB in two processes")
            records += process_copy.measure(nbytes, config.repeat, progress)
    progress.update(1, 1, "done")
    return make_result("p2p", config, records)


@figure
def plot_p2p(result: Result):
    """Heatmaps of GB/s for every ordered pair: direct beside via host."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = [r for r in result.records if r.get("record") == "copy"]
    procs = [r for r in result.records if r.get("record") == "process"]
    if not rows and procs:
        fig = go.Figure(
            go.Bar(
                x=[r["method"] for r in procs],
                y=[r["gbps"] for r in procs],
                text=[f"{r['gbps']:.2f} GB/s" for r in procs],
                marker={"color": ["#2ca02c", "#ff7f0e", "#d62728"][: len(procs)]},
            )
        )
        fig.update_layout(
            title=f"Rank 0 -> rank 1, {procs[0]['bytes'] >> 20} MiB: one hop vs extra buffers "
            "(two CPU processes, live)",
            yaxis={"title": "GB/s"},
            height=380,
        )
        return fig
    if not rows:
        note = next((r["note"] for r in result.records if r.get("note")), "no copies")
        fig = go.Figure()
        fig.add_annotation(text=note, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
        fig.update_layout(
            title="GPU to GPU: nothing to measure here",
            height=180,
            xaxis={"visible": False},
            yaxis={"visible": False},
        )
        return fig
    gpus = sorted({r["src"] for r in rows} | {r["dst"] for r in rows})
    fig = make_subplots(rows=1, cols=2, subplot_titles=("direct (P2P if allowed)", "via host"))
    for col, via in ((1, False), (2, True)):
        cell = {(r["src"], r["dst"]): r["gbps"] for r in rows if (r["path"] == "via host") == via}
        z = [[cell.get((s, d)) for d in gpus] for s in gpus]
        fig.add_heatmap(
            z=z,
            x=gpus,
            y=gpus,
            texttemplate="%{z:.1f}",
            coloraxis="coloraxis",
            row=1,
            col=col,
        )
    fig.update_layout(title="GPU to GPU GB/s (row = source)", coloraxis={"colorscale": "Viridis"})
    return fig
