"""Experiment ``strategy-model``: data, pipeline, tensor and tensor+data parallel to 512 GPUs.

Part 1's scaling model (:mod:`hpclab.ddp.cost_model`: ring all-reduce with latency alpha and
link bandwidth B, links inside a node and the network between nodes) extended with what model
parallelism adds: the pipeline bubble, activation traffic and memory per GPU. The workload is
the tower of MLP blocks ``d -> 4d -> d`` of :mod:`hpclab.parallel.memory`, at a size where one
GPU is far too small; a global batch of ``tokens`` rows is processed per step in micro-batches
of ``micro_tokens`` (gradient accumulation), on n GPUs::

    compute      6 P tokens / (n F)                     (2 FLOP per multiply-add, x3 for
                                                         backward; F = achieved FLOP/s per GPU)
    data         + ring all-reduce of the gradients (2 bytes each) over n GPUs
    pipeline     x (m + n - 1) / m  (the bubble, m = tokens / micro_tokens), + activations and
                 gradients sent between stages;  n <= blocks
    tensor       + 2 all-reduces per block of [tokens, d] (bf16), one forward one backward
                 (Megatron-LM); across nodes once n > gpus_per_node
    tensor+data  tensor parallel inside a node, data parallel between nodes (Fox et al. 2015
                 combine model and data parallelism; Megatron-LM does so at scale)

    memory per GPU = bytes_per_param x its share of P   (16: bf16 weights and gradients and
                     fp32 Adam state with a master copy, Rajbhandari et al. 2020; the byte
                     model is chapter 09's, :func:`hpclab.memory.model.bytes_per_param`)
                   + its activations (2 bytes x 5 d values per token per block, of the
                     micro-batches it keeps alive: 1, or min(n, m) on a pipeline's first stage)

Communication is not overlapped with compute here (the overlap of part 1's ``overlap`` is
left out to keep the comparison plain). A model, not a measurement: for reasoning about which
strategy fits and which scales, not for predicting a cluster's throughput to the percent.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpclab.axes import DOUBLING
from hpclab.config import Config, param
from hpclab.ddp.cost_model import DEFAULT_LINK_EFFICIENCY, LINKS, ring_allreduce_s, slowest_link
from hpclab.display import figure
from hpclab.memory.model import bytes_per_param
from hpclab.progress import Progress
from hpclab.results import Result, make_result

KINDS = ("data", "pipeline", "tensor", "tensor+data")


@dataclass(frozen=True)
class StrategyModelConfig(Config):
    blocks: int = param(48, min=1, max=1024, help="MLP blocks d -> 4d -> d")
    width: int = param(8192, min=64, max=65536, log=True, help="d, the block width")
    tokens: int = param(2**19, min=1, max=2**26, log=True, help="global batch (rows) per step")
    micro_tokens: int = param(8192, min=1, max=2**26, log=True, help="rows per micro-batch")
    gpu_tflops: float = param(400.0, min=0.1, max=1e5, help="achieved TFLOP/s per GPU")
    gpu_memory_gb: float = param(80.0, min=1.0, max=1e4, help="memory per GPU (GB)")
    bytes_per_param: float = param(
        float(bytes_per_param("adam", "mixed")), min=2.0, max=32.0, help="weights+grads+optimizer"
    )
    link: str = param("nvlink-h100", choices=tuple(LINKS), help="link between GPUs in a node")
    network: str = param("ib-hdr", choices=tuple(LINKS), help="network between nodes")
    gpus_per_node: int = param(8, min=1, max=64, help="GPUs per node")
    max_gpus: int = param(512, min=1, max=4096, log=True, help="largest GPU count (powers of 2)")


def _link(cfg: StrategyModelConfig, n: int) -> tuple[float, float]:
    """(alpha_s, bytes/s) of a ring over n GPUs: the node's link, or the network beyond it."""
    chosen = LINKS[cfg.link]
    if n > cfg.gpus_per_node:
        chosen = slowest_link(chosen, LINKS[cfg.network])
    return chosen.alpha_us * 1e-6, chosen.bandwidth_gbps * DEFAULT_LINK_EFFICIENCY * 1e9


def predict(cfg: StrategyModelConfig, kind: str, n: int) -> dict | None:
    """One strategy on ``n`` GPUs (None when it cannot be cut that way)."""
    d, layers = cfg.width, cfg.blocks
    params = layers * (8 * d * d + 5 * d)
    m = max(1, cfg.tokens // cfg.micro_tokens)
    act_token_block = 2 * 5 * d  # bytes per row per block (bf16)
    compute = 6 * params * cfg.tokens / (n * cfg.gpu_tflops * 1e12)
    bubble = comm = 0.0
    if kind == "data":
        shard, blocks_here, alive, act_row = 1, layers, 1, act_token_block
        comm = ring_allreduce_s(2 * params, n, *_link(cfg, n))
    elif kind == "pipeline":
        if n > layers:
            return None
        shard, blocks_here, alive, act_row = n, layers / n, min(n, m), act_token_block
        bubble = compute * (n - 1) / m
        if n > 1:  # each micro-batch: activations forward, gradients back, over one hop
            alpha, bw = _link(cfg, 2 if n <= cfg.gpus_per_node else cfg.gpus_per_node + 1)
            comm = 2 * m * (alpha + 2 * cfg.micro_tokens * d / bw)
    elif kind in ("tensor", "tensor+data"):
        t = n if kind == "tensor" else min(n, cfg.gpus_per_node)
        replicas = n // t
        shard, blocks_here, alive = t, layers, 1
        act_row = 2 * (d + 4 * d / t)  # each GPU keeps the whole block input
        rows = cfg.tokens / replicas
        comm = 2 * layers * ring_allreduce_s(2 * rows * d, t, *_link(cfg, t))
        if replicas > 1:  # data parallel between nodes, each node a tensor-parallel replica
            alpha, bw = _link(cfg, cfg.gpus_per_node + 1)
            comm += ring_allreduce_s(2 * params / t, replicas, alpha, bw)
    else:
        raise ValueError(f"kind={kind!r}; allowed: {', '.join(KINDS)}")
    memory = cfg.bytes_per_param * params / shard + act_row * blocks_here * alive * cfg.micro_tokens
    step = compute + bubble + comm
    return {
        "tier": "model",
        "strategy": kind,
        "gpus": n,
        "params": params,
        "compute_s": compute,
        "bubble_s": bubble,
        "comm_s": comm,
        "step_s": step,
        "tokens_per_s": cfg.tokens / step,
        "efficiency": compute / step,
        "memory_gb": memory / 1e9,
        "fits": memory / 1e9 <= cfg.gpu_memory_gb,
    }


def run_strategy_model(config: StrategyModelConfig, progress: Progress) -> Result:
    records = []
    n = 1
    while n <= config.max_gpus:
        for kind in KINDS:
            rec = predict(config, kind, n)
            if rec is not None:
                records.append(rec)
        n *= 2
    progress.update(1, 1, "")
    return make_result("strategy-model", config, records)


@figure
def plot_strategy_model(result: Result):
    """Throughput (filled where the model fits in a GPU) and memory per GPU vs GPU count."""
    from plotly.subplots import make_subplots

    cfg = result.config
    fig = make_subplots(
        rows=1, cols=2, subplot_titles=("tokens/s (open: does not fit)", "GB per GPU")
    )
    for kind in KINDS:
        rows = sorted((r for r in result.records if r["strategy"] == kind), key=lambda r: r["gpus"])
        x = [r["gpus"] for r in rows]
        symbols = ["circle" if r["fits"] else "circle-open" for r in rows]
        fig.add_scatter(
            x=x, y=[r["tokens_per_s"] for r in rows], mode="lines+markers", name=kind,
            legendgroup=kind, marker={"symbol": symbols, "size": 9}, row=1, col=1,
            customdata=[[r["efficiency"], r["bubble_s"], r["comm_s"]] for r in rows],
            hovertemplate="%{x} GPUs: %{y:.3g} tokens/s, efficiency %{customdata[0]:.2f}, "
            "bubble %{customdata[1]:.2f} s, comm %{customdata[2]:.2f} s<extra></extra>",
        )  # fmt: skip
        fig.add_scatter(
            x=x, y=[r["memory_gb"] for r in rows], mode="lines+markers", name=kind,
            legendgroup=kind, showlegend=False, marker={"symbol": symbols, "size": 9}, row=1, col=2,
        )  # fmt: skip
    gpus = sorted({r["gpus"] for r in result.records})
    # a line trace, not add_hline: on a log axis a shape's y is read as a power of ten
    fig.add_scatter(
        x=gpus, y=[cfg["gpu_memory_gb"]] * len(gpus), mode="lines", row=1, col=2,
        line={"dash": "dash", "color": "gray"}, name=f"{cfg['gpu_memory_gb']:g} GB per GPU",
    )  # fmt: skip
    fig.update_xaxes(type="log", dtick=DOUBLING, title="GPUs")
    fig.update_yaxes(type="log")
    params = result.records[0]["params"] if result.records else 0
    fig.update_layout(
        title=f"{params / 1e9:.1f} B parameters: which strategy fits, which scales? "
        f"({cfg['link']} x {cfg['gpus_per_node']} per node, {cfg['network']})",
        height=440,
    )
    return fig
