"""Experiment ``zero-plan``: memory per device for a model, a GPU count, a precision and a ZeRO
stage, against a device's capacity (chapter 09, part 2; chapter 06 part 2's ``strategy-model``
uses :func:`sharded_state_bytes` for its memory line: one formula, not two).

Model states (Rajbhandari et al. 2020, "ZeRO", §3.1 and §5): a parameter costs ``w`` bytes of
weight, ``g`` of gradient and ``K`` of optimizer state. Mixed-precision Adam: w = g = 2 (fp16 or
bf16), K = 12 (fp32 master weights, momentum, variance); fp32 Adam: 4, 4, 8. On N_d
data-parallel devices::

    stage 0 (DDP)         (w + g + K) Psi
    stage 1 (P_os)        (w + g) Psi + K Psi / N_d
    stage 2 (P_os+g)      w Psi + (g + K) Psi / N_d
    stage 3 (P_os+g+p)    (w + g + K) Psi / N_d

Psi = 7.5e9, N_d = 64, K = 12 gives 120, 31.4, 16.6 and 1.88 GB (the paper's Fig. 1 and Table 1).

HSDP (a fifth row, beside the stages): ZeRO-3 over the ``gpus_per_node`` devices of one node,
replicated across the nodes, so stage 3's state with N_d = the devices of a node. Every row also
carries the bytes one device sends per step, inside its node and across nodes
(:mod:`hpclab.sharding.comm_model`): what HSDP trades its extra memory for.

Activations (residual state, the paper's §3.2): a transformer shaped from Psi alone, GPT-like
(hidden h = 128 x the heads, Psi = 12 L h^2 with L = h / 128), keeps 34 s b h bytes a layer for
a micro-batch of b sequences of s tokens in 16-bit (Korthikanti et al. 2022, §4.1, without the
attention-score term that FlashAttention does not store); twice that in fp32. With activation
checkpointing a layer keeps only its 16-bit input (2 s b h) and one layer is recomputed at a
time. GB here means 1e9 bytes, as in the paper; device capacities are the vendors' nominal sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hpclab.config import Config, ConfigError, param
from hpclab.display import figure
from hpclab.progress import Progress
from hpclab.results import Result, make_result

PRECISIONS = ("mixed", "fp32")
STAGES = (0, 1, 2, 3)
STAGE_NAMES = {0: "DDP", 1: "ZeRO-1 (P_os)", 2: "ZeRO-2 (P_os+g)", 3: "ZeRO-3 (P_os+g+p)"}
HSDP = "HSDP (ZeRO-3 in a node)"
STAGE_STRATEGY = {0: "ddp", 1: "zero1", 2: "zero2", 3: "zero3"}  # :mod:`comm_model`'s names
DEVICES_GB = {  # nominal memory per device (vendors' data sheets)
    "h100-80": 80.0,
    "a100-80": 80.0,
    "a100-40": 40.0,
    "v100-32": 32.0,
    "v100-16": 16.0,
    "this-machine": 0.0,  # filled from this machine's RAM when asked
}
GB = 1e9


def sharded_state_bytes(
    params: float, dp: int, stage: int, weight: float, grad: float, optim: float
) -> dict[str, float]:
    """Bytes of weights, gradients and optimizer state on one of ``dp`` data-parallel devices."""
    if stage not in STAGES:
        raise ValueError(f"stage={stage!r} does not exist; allowed: 0 (DDP), 1, 2, 3 (ZeRO)")
    w = weight * params / (dp if stage >= 3 else 1)
    g = grad * params / (dp if stage >= 2 else 1)
    o = optim * params / (dp if stage >= 1 else 1)
    return {"params": w, "grads": g, "optimizer": o, "total": w + g + o}


def split(precision: str, optimizer: str = "adam") -> tuple[int, int, int]:
    """(weight, gradient, optimizer-state K) bytes per parameter: part 1's byte model
    (:func:`hpclab.memory.model.bytes_per_param`) cut as ZeRO cuts it, the fp32 master copy
    counted in K (mixed Adam: 2, 2, 12; fp32 Adam: 4, 4, 8)."""
    from hpclab.memory.model import bytes_per_param

    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}; allowed: {', '.join(PRECISIONS)}")
    half = 2 if precision == "mixed" else 4
    return half, half, bytes_per_param(optimizer, precision) - 2 * half


def state_bytes(params: float, dp: int, stage: int, precision: str = "mixed") -> dict[str, float]:
    """:func:`sharded_state_bytes` with a precision's bytes per parameter (Adam)."""
    return sharded_state_bytes(params, dp, stage, *split(precision))


def shape(params: float) -> tuple[int, int]:
    """(hidden, layers) of a GPT-like transformer with ``params`` parameters (L = h / 128)."""
    hidden = max(128, round((params * 128 / 12) ** (1 / 3) / 128) * 128)
    return hidden, max(1, round(params / (12 * hidden * hidden)))


def activation_bytes(
    params: float, micro_batch: int, seq: int, precision: str, checkpointing: bool
) -> float:
    """Activations one device keeps for a micro-batch (module docstring's formula)."""
    h, layers = shape(params)
    per_layer = 34 * seq * micro_batch * h * (2 if precision == "fp32" else 1)
    if checkpointing:  # each layer's input, plus one layer recomputed at a time
        return layers * 2 * seq * micro_batch * h + per_layer
    return layers * per_layer


def capacity_gb(device: str) -> float:
    if device not in DEVICES_GB:
        raise ValueError(f"device={device!r}; allowed: {', '.join(DEVICES_GB)}")
    if device == "this-machine":
        import psutil

        return psutil.virtual_memory().total / GB
    return DEVICES_GB[device]


@dataclass(frozen=True)
class PlanConfig(Config):
    params_b: float = param(7.5, min=0.001, max=10000.0, log=True, help="parameters (billions)")
    gpus: int = param(64, min=1, max=65536, log=True, help="data-parallel devices")
    precision: str = param("mixed", choices=PRECISIONS, help="mixed (bf16 + fp32 Adam)")
    stage: int = param(3, min=0, max=3, help="ZeRO stage (0: DDP)")
    checkpointing: bool = param(False, help="activation checkpointing, a layer per segment")
    micro_batch: int = param(1, min=0, max=1024, log=True, help="sequences per device (0: none)")
    seq: int = param(2048, min=1, max=1 << 20, log=True, help="tokens per sequence")
    device: str = param("h100-80", choices=tuple(DEVICES_GB), help="device to fit in")
    gpus_per_node: int = param(8, min=1, max=64, log=True, help="devices a node (HSDP's shards)")

    def check(self) -> None:
        nodes(self)


def nodes(cfg: PlanConfig) -> tuple[int, int]:
    """(nodes, devices per node) of ``cfg``: whole nodes, or one node when the GPUs fit in one."""
    if cfg.gpus <= cfg.gpus_per_node:
        return 1, cfg.gpus
    if cfg.gpus % cfg.gpus_per_node:
        raise ConfigError(
            f"gpus={cfg.gpus} is not a whole number of nodes of gpus_per_node="
            f"{cfg.gpus_per_node}; allowed: gpus <= {cfg.gpus_per_node} or a multiple of it"
        )
    return cfg.gpus // cfg.gpus_per_node, cfg.gpus_per_node


def plan(cfg: PlanConfig, stage: int | str, params: float | None = None) -> dict[str, Any]:
    """One stage's (or ``"hsdp"``'s) bytes per device, in GB, whether they fit ``cfg.device``,
    and the GB one device sends per step inside its node and across nodes."""
    from hpclab.sharding.comm_model import comm_bytes

    params = cfg.params_b * 1e9 if params is None else params
    n_nodes, per_node = nodes(cfg)
    weight, grad, _ = split(cfg.precision)
    if stage == "hsdp":
        state = state_bytes(params, per_node, 3, cfg.precision)
        sent = comm_bytes("hsdp", params, cfg.gpus, n_nodes, weight, grad)
    else:
        state = state_bytes(params, cfg.gpus, stage, cfg.precision)
        sent = comm_bytes(STAGE_STRATEGY[stage], params, cfg.gpus, n_nodes, weight, grad)
    act = activation_bytes(params, cfg.micro_batch, cfg.seq, cfg.precision, cfg.checkpointing)
    total = state["total"] + act
    cap = capacity_gb(cfg.device)
    return {
        "tier": "model",
        "stage": stage,
        "strategy": HSDP if stage == "hsdp" else STAGE_NAMES[stage],
        "params_gb": state["params"] / GB,
        "grads_gb": state["grads"] / GB,
        "optimizer_gb": state["optimizer"] / GB,
        "activations_gb": act / GB,
        "total_gb": total / GB,
        "capacity_gb": cap,
        "fits": total / GB <= cap,
        "intra_node_gb_per_step": sent["intra_node"] / GB,
        "inter_node_gb_per_step": sent["inter_node"] / GB,
    }


def largest_fit(cfg: PlanConfig, stage: int | str) -> float:
    """The most parameters that fit ``cfg.device`` at ``stage`` (bisection; 0 if none)."""
    lo, hi = 0.0, 1e15
    if not plan(cfg, stage, 1e6)["fits"]:
        return 0.0
    lo = 1e6
    for _ in range(100):
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if plan(cfg, stage, mid)["fits"] else (lo, mid)
        if hi / lo < 1.001:
            break
    return lo


def run_plan(config: PlanConfig, progress: Progress) -> Result:
    records = []
    for stage in (*STAGES, "hsdp"):
        rec = plan(config, stage)
        rec["largest_params_b"] = largest_fit(config, stage) / 1e9
        rec["chosen"] = stage == config.stage
        records.append(rec)
    progress.update(1, 1, "")
    return make_result("zero-plan", config, records, timed=False)


def summary(result: Result) -> str:
    """One line: does the chosen stage fit, with the estimate, and the largest model that does."""
    cfg = result.config
    rec = next(r for r in result.records if r["chosen"])
    verdict = "fits" if rec["fits"] else "does NOT fit"
    return (
        f"{cfg['params_b']:g} B parameters on {cfg['gpus']} x {cfg['device']} "
        f"({cfg.get('gpus_per_node', 8)} a node), "
        f"{rec['strategy']}: {rec['total_gb']:.1f} GB per device {verdict} in "
        f"{rec['capacity_gb']:.0f} GB; the largest that fits: {rec['largest_params_b']:.3g} B"
    )


@figure
def plot_plan(result: Result):
    """Stacked GB per device by stage (and HSDP), the device's capacity as a line; beside it
    the GB one device sends per step, inside its node and across nodes."""
    from plotly.subplots import make_subplots

    rows = result.records
    # short names ("ZeRO-2", "HSDP"): two panels side by side leave no room for the long ones
    names = [("▶ " if r["chosen"] else "") + r["strategy"].split(" (")[0] for r in rows]
    fig = make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4], subplot_titles=(
        "GB per device (model)", "GB sent per device per step (model)"))  # fmt: skip
    for kind in ("params", "grads", "optimizer", "activations"):
        fig.add_bar(x=names, y=[r[f"{kind}_gb"] for r in rows], name=kind, row=1, col=1)
    fig.add_scatter(
        x=names, y=[rows[0]["capacity_gb"]] * len(rows), mode="lines", name="capacity",
        line={"dash": "dash", "color": "black"}, row=1, col=1,
    )  # fmt: skip
    for where, name, color in (
        ("intra_node", "sent inside a node", "#a6cee3"),
        ("inter_node", "sent across nodes", "#1f78b4"),
    ):
        fig.add_bar(x=names, y=[r[f"{where}_gb_per_step"] for r in rows], name=name,
                    marker_color=color, row=1, col=2)  # fmt: skip
    fig.update_layout(barmode="stack", title=summary(result), height=460, title_font_size=13)
    return fig
