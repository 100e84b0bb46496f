"""Experiment ``scaling-model``: what-if to 512 GPUs with the chapter's model (chapter 06).

Choose a workload (Guan 2019's MNIST, ResNet-50 or Horovod runs, or your own numbers), the
link inside a node and the network between nodes; get predicted step time, samples/s and
efficiency per GPU count, overlaid with Guan 2019's measured tables for that workload. The
formulas and presets live in :mod:`hpclab.ddp.cost_model`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpclab.axes import DOUBLING
from hpclab.config import Config, ConfigError, param
from hpclab.ddp.cost_model import LINKS, WORKLOADS, Workload, predict
from hpclab.ddp.plots import add_both_panels, reference_scaling
from hpclab.display import figure
from hpclab.progress import Progress
from hpclab.results import Result, make_result


@dataclass(frozen=True)
class ScalingModelConfig(Config):
    workload: str = param(
        "resnet50-guan2019", choices=(*WORKLOADS, "custom"), help="preset, or custom numbers below"
    )
    link: str = param("pcie3", choices=tuple(LINKS), help="link between GPUs inside a node")
    network: str = param("ib-edr", choices=tuple(LINKS), help="network between nodes")
    gpus_per_node: int = param(8, min=1, max=64, help="GPUs per node (beyond: the network)")
    nics_per_node: int = param(1, min=1, max=64, help="NICs per node (a ring per NIC)")
    max_gpus: int = param(512, min=1, max=4096, log=True, help="largest GPU count (powers of 2)")
    scaling: str = param(
        "preset", choices=("preset", "weak", "strong"), help="preset: as the source ran it"
    )
    overlap: float = param(0.0, min=0.0, max=1.0, help="fraction of all-reduce hidden by compute")
    link_efficiency: float = param(0.8, min=0.05, max=1.0, help="achieved / spec bandwidth")
    alpha_us: float = param(-1.0, min=-1.0, max=1e6, help="latency override (us; -1: preset)")
    bandwidth_gbps: float = param(-1.0, min=-1.0, max=1e6, help="achieved GB/s (-1: preset)")
    params_m: float = param(3.0, min=1e-6, max=1e6, help="custom: parameters (millions)")
    batch_size: int = param(256, min=1, max=1 << 20, help="custom: batch at which compute is")
    compute_ms: float = param(10.0, min=1e-6, max=1e7, help="custom: one step's compute (ms)")
    floor_ms: float = param(0.0, min=0.0, max=1e7, help="custom: smallest step compute (ms)")

    def check(self) -> None:
        if self.nics_per_node > self.gpus_per_node:
            raise ConfigError(
                f"nics_per_node={self.nics_per_node} is more than gpus_per_node="
                f"{self.gpus_per_node}; allowed: 1 .. gpus_per_node"
            )
        if self.scaling == "preset" and self.workload == "custom":
            raise ConfigError("scaling='preset' needs a preset workload; allowed: weak, strong")

    def resolved(self) -> tuple[Workload, str]:
        if self.workload == "custom":
            w = Workload(
                self.params_m * 1e6,
                self.batch_size,
                self.compute_ms,
                self.floor_ms,
                self.scaling,
                "",
                "your numbers",
            )
        else:
            w = WORKLOADS[self.workload]
        return w, (w.scaling if self.scaling == "preset" else self.scaling)


def run_scaling_model(config: ScalingModelConfig, progress: Progress) -> Result:
    workload, scaling = config.resolved()
    records = []
    n = 1
    while n <= config.max_gpus:
        p = predict(
            workload,
            n,
            scaling,
            config.link,
            config.network,
            config.gpus_per_node,
            overlap=config.overlap,
            link_efficiency=config.link_efficiency,
            alpha_us=None if config.alpha_us < 0 else config.alpha_us,
            bandwidth_gbps=None if config.bandwidth_gbps < 0 else config.bandwidth_gbps,
            nics_per_node=config.nics_per_node,
        )
        records.append(
            {"tier": "model", "workload": config.workload, "scaling": scaling, **p.__dict__}
        )
        n *= 2
    if workload.reference:
        where = {}
        if workload.reference == "guan2019_mnist_multigpu":
            where = {"api": "keras", "gpu": "v100", "batch_size": workload.batch}
        for r in reference_scaling(workload.reference, where):
            records.append(
                {
                    "tier": "reference",
                    "workload": config.workload,
                    "gpus": r["gpus"],
                    "samples_per_s": r["samples_per_s"],
                    "efficiency": r["efficiency"],
                    "source": r["source"],
                }
            )
    progress.update(1, 1, "")
    return make_result("scaling-model", config, records)


@figure
def plot_scaling_model(result: Result):
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("samples/s", "efficiency"))
    for tier, style in (
        ("model", {"mode": "lines+markers"}),
        ("reference", {"mode": "markers", "marker": {"size": 11, "symbol": "diamond"}}),
        ("live", {"mode": "markers", "marker": {"size": 12, "symbol": "circle"}}),
    ):
        rows = sorted((r for r in result.records if r["tier"] == tier), key=lambda r: r["gpus"])
        if not rows:
            continue
        name = {
            "model": "model",
            "live": "measured here (live)",
            "reference": f"reference: {rows[0].get('source', '')[:60]}...",
        }[tier]
        x = [r["gpus"] for r in rows]
        add_both_panels(
            fig,
            x,
            [r["samples_per_s"] for r in rows],
            [r["efficiency"] for r in rows],
            name,
            legendgroup=tier,
            **style,
        )
    fig.update_xaxes(type="log", dtick=DOUBLING, title="GPUs")
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_yaxes(range=[0, 1.1], row=1, col=2)
    fig.update_layout(title=f"Scaling model: {result.config.get('workload')}", height=420)
    return fig


def from_measurements(ddp: Result, allreduce: Result, max_gpus: int = 64, **overrides: Any):
    """The model calibrated from your own runs: compute from a ``ddp`` result's one-rank step,
    alpha and B from an ``allreduce`` result's fit; the ddp points are overlaid (live tier).

    When the ddp run also ran one rank on the allocation's only GPU (``role="gpu-rank"``), the
    compute comes from that GPU step and the all-reduce from the ``link`` preset (the measured
    fit is the CPU ranks' gloo over loopback, not a GPU link); only the GPU point is overlaid.
    """
    live = [r for r in ddp.records if r["tier"] == "live"]
    gpu = next((r for r in live if r.get("role") == "gpu-rank"), None)
    base = gpu or min(live, key=lambda r: r["ranks"])
    if base["ranks"] != 1:
        raise ValueError("the ddp result needs its one-rank baseline (run it with baseline=True)")
    fit = next((r for r in allreduce.records if r["tier"] == "model"), None)
    if fit is None and gpu is None:
        raise ValueError("the allreduce result has no alpha-beta fit (it needs >= 2 sizes)")
    comm = {"link": "pcie5"} if gpu else {
        "alpha_us": fit["alpha_s"] * 1e6, "bandwidth_gbps": fit["bandwidth_gbps"]
    }  # fmt: skip
    params = {
        "workload": "custom",
        "scaling": base["scaling"],
        "params_m": base["params"] / 1e6,
        "batch_size": base["global_batch"],
        "compute_ms": base["step_s"] * 1e3,
        **comm,
        "max_gpus": max_gpus,
        **overrides,
    }
    result = run_scaling_model(ScalingModelConfig.create(**params), Progress())
    for r in [gpu] if gpu else live:
        if r["scaling"] == params["scaling"]:
            result.records.append(
                {
                    "tier": "live",
                    "gpus": r["ranks"],
                    "samples_per_s": r["samples_per_s"],
                    "efficiency": 1.0 if r is gpu else r["efficiency"],  # one GPU: itself
                    "model": r["model"],
                }
            )
    return result


def model_vs_reference(**params: Any) -> Any:
    """Predicted vs Guan 2019's measured samples/s and efficiency per GPU count (a DataFrame)."""
    import pandas as pd

    cfg = ScalingModelConfig(**params)
    recs = run_scaling_model(cfg, Progress()).records
    ref = {r["gpus"]: r for r in recs if r["tier"] == "reference"}
    rows = []
    for r in recs:
        if r["tier"] != "model" or (ref and r["gpus"] > max(ref)):
            continue
        seen = ref.get(r["gpus"], {})
        rows.append(
            {
                "gpus": r["gpus"],
                "model step ms": round(r["step_s"] * 1e3, 2),
                "model samples/s": round(r["samples_per_s"]),
                "model efficiency": round(r["efficiency"], 2),
                "Guan 2019 samples/s": round(seen["samples_per_s"]) if seen else None,
                "Guan 2019 efficiency": round(seen["efficiency"], 2) if seen else None,
            }
        )
    return pd.DataFrame(rows).set_index("gpus")
