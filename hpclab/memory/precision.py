"""Experiment ``precision``: fp32, bf16 autocast and fp16 autocast with a loss scaler (ch. 09).

From one seed, the same model trains the same batches in each precision through the engine's
step (:func:`hpclab.train.train_step`, ``dtype=``), and for each one the records say:

- ``final_loss`` and the loss curve (``kind="curve"``): what the precision costs in accuracy;
- ``peak_bytes``: the allocator's peak of a step (:mod:`hpclab.memory.probe`);
- ``step_s``: the median step time (:func:`hpclab.measure.timing.time_fn`); on a CPU without
  bf16/fp16 matrix instructions (``avx512_bf16``, ``amx_bf16``, ``avx512_fp16``) half-precision
  products are emulated and slower, not faster: ``cpu_half_flags`` names what this CPU has;
- ``grad_zero_fraction``: of one backward pass of the untrained model in this precision without
  loss scaling, the fraction of gradient elements that are exactly zero (ReLU units that are off
  give zeros in every precision; what fp16 adds are the gradients below its smallest subnormal,
  2**-24, that round to zero); ``grad_zero_fraction_scaled`` is the same with the loss scaled by
  GradScaler's first scale (2**16), as fp16 training does (Micikevicius et al. 2018).

``kind="histogram"`` records count the fp32 gradient's elements by power of two (``log2_bin``:
``2**bin <= |g| < 2**(bin+1)``), to plot against fp16's smallest normal (2**-14) and subnormal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from hpclab.config import Config, param
from hpclab.display import figure
from hpclab.dist import RankContext
from hpclab.measure.timing import time_fn
from hpclab.memory.anatomy import batch
from hpclab.memory.probe import anatomy, step_timeline
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.train import (
    DTYPES,
    autocast,
    grad_scaler,
    make_model,
    run_spec,
    synthetic_images,
    train_step,
)
from hpclab.train.optim import OPTIMIZERS, make_optimizer

FP16_NORMAL = 2.0**-14  # torch.finfo(torch.float16).smallest_normal
FP16_SUBNORMAL = 2.0**-24  # the smallest positive fp16 number
HALF_FLAGS = ("avx512_bf16", "amx_bf16", "avx512_fp16", "amx_fp16")


@dataclass(frozen=True)
class PrecisionConfig(Config):
    dtypes: tuple = param(DTYPES, choices=DTYPES, help="precisions to compare")
    depth: int = param(12, min=2, max=64, help="linear layers (deep nets have tiny gradients)")
    width: int = param(256, min=8, max=4096, log=True, quick=128, help="features per layer")
    side: int = param(16, min=4, max=64, help="images are side x side")
    batch_size: int = param(128, min=8, max=8192, log=True, quick=64, help="samples per step")
    steps: int = param(60, min=2, max=10000, quick=20, help="training steps per precision")
    lr: float = param(2e-3, min=1e-6, max=10.0, log=True, help="learning rate")
    optimizer: str = param("adam", choices=OPTIMIZERS, help="optimizer")
    seed: int = param(0, min=0, max=2**31 - 1, help="seed of the weights and the data")


def cpu_half_flags() -> list[str]:
    """Which half-precision matrix instructions this CPU announces (``/proc/cpuinfo``)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next((ln for ln in f if ln.startswith("flags")), "").split())
    except OSError:
        return []
    return [name for name in HALF_FLAGS if name in flags]


def zero_fraction(cfg: PrecisionConfig, dtype: str, x, y, scale: float = 1.0) -> float:
    """Fraction of exactly-zero gradient elements of one backward in ``dtype`` (loss x scale)."""
    model = make_model("deep", cfg.side**2, seed=cfg.seed, depth=cfg.depth, width=cfg.width)
    with autocast(x.device.type, dtype):
        loss = F.cross_entropy(model.to(x.device)(x), y)
    (loss * scale).backward()
    grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    return float((grads == 0).float().mean())


def histogram(cfg: PrecisionConfig, x, y) -> list[dict[str, Any]]:
    """The fp32 gradient's elements by power of two of their magnitude (zeros apart)."""
    model = make_model("deep", cfg.side**2, seed=cfg.seed, depth=cfg.depth, width=cfg.width)
    F.cross_entropy(model.to(x.device)(x), y).backward()
    g = torch.cat([p.grad.reshape(-1) for p in model.parameters()]).abs().double().cpu()
    bins = torch.floor(torch.log2(g[g > 0])).long()
    counts = torch.bincount(bins - bins.min()).tolist()
    rows = [{"kind": "histogram", "log2_bin": int(bins.min()) + i, "count": c}
            for i, c in enumerate(counts) if c]  # fmt: skip
    return rows + [{"kind": "histogram", "log2_bin": None, "count": int((g == 0).sum())}]


def train(cfg: PrecisionConfig, dtype: str, device: str) -> dict[str, Any]:
    """``steps`` steps from the seed on fixed batches; the losses and the median step time."""
    model = make_model("deep", cfg.side**2, seed=cfg.seed, depth=cfg.depth, width=cfg.width)
    model = model.to(device)
    opt = make_optimizer(cfg.optimizer, model.parameters(), cfg.lr)
    scaler = grad_scaler(device, dtype)
    x, y = synthetic_images(4 * cfg.batch_size, (1, cfg.side, cfg.side), seed=cfg.seed + 1)
    data = list(zip(x.reshape(len(x), -1).to(device).split(cfg.batch_size),
                    y.to(device).split(cfg.batch_size), strict=True))  # fmt: skip
    losses: list[float] = []

    def step() -> None:
        x, y = data[len(losses) % len(data)]
        losses.append(train_step(model, opt, x, y, dtype=dtype, scaler=scaler))

    timing = time_fn(step, device=device, warmup=1, repeat=cfg.steps - 1, max_time_s=math.inf)
    return {"losses": losses, "step_s": timing.median_s,
            "loss_scale": scaler.get_scale() if scaler is not None else 1.0}  # fmt: skip


def precision_worker(ctx: RankContext, cfg: PrecisionConfig) -> list[dict[str, Any]]:
    x, y = batch(cfg, ctx.device)
    rows = histogram(cfg, x, y)
    for i, dtype in enumerate(cfg.dtypes):
        ctx.progress(i, len(cfg.dtypes), dtype)
        run = train(cfg, dtype, ctx.device)
        build = lambda: make_model("deep", cfg.side**2, seed=cfg.seed, depth=cfg.depth,  # noqa: E731
                                   width=cfg.width)  # fmt: skip
        opt = lambda p: make_optimizer(cfg.optimizer, p, cfg.lr)  # noqa: E731
        peak = anatomy(step_timeline(build, opt, x, y, dtype=dtype))["peak"]
        scaled = 2.0**16 if dtype == "fp16" else 1.0
        rows.append({
            "kind": "summary", "dtype": dtype, "final_loss": run["losses"][-1],
            "first_loss": run["losses"][0], "peak_bytes": peak, "step_s": run["step_s"],
            "grad_zero_fraction": zero_fraction(cfg, dtype, x, y),
            "grad_zero_fraction_scaled": zero_fraction(cfg, dtype, x, y, scaled),
            "loss_scale": run["loss_scale"], "cpu_half_flags": " ".join(cpu_half_flags()),
        })  # fmt: skip
        rows += [{"kind": "curve", "dtype": dtype, "step": k, "loss": v}
                 for k, v in enumerate(run["losses"])]  # fmt: skip
    return rows


def run_precision(config: PrecisionConfig, progress: Progress) -> Result:
    # one CPU rank in a fresh process: the allocator's view is this run's alone
    rows = run_spec(config, 1, worker=precision_worker, device="cpu", progress=progress)[0]
    return make_result("precision", config, [{"tier": "live", **r} for r in rows])


@figure
def plot_precision(result: Result):
    """Loss curves per precision, and the fp32 gradient's magnitudes against fp16's limits."""
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        "loss per step (same seed, same batches)", "fp32 gradient elements by magnitude"))  # fmt: skip
    for dtype in result.config["dtypes"]:
        mine = [r for r in result.records if r.get("kind") == "curve" and r["dtype"] == dtype]
        fig.add_scatter(x=[r["step"] for r in mine], y=[r["loss"] for r in mine], name=dtype,
                        mode="lines", row=1, col=1)  # fmt: skip
    hist = [r for r in result.records if r.get("kind") == "histogram" and r["log2_bin"] is not None]
    fig.add_bar(x=[r["log2_bin"] for r in hist], y=[r["count"] for r in hist], row=1, col=2,
                name="|gradient| in [2^k, 2^(k+1))", marker_color="gray")  # fmt: skip
    # the labels sit on either side of their lines (10 bins apart: side by side they collide)
    for value, name, side in (
        (-14, "fp16 smallest<br>normal 2^-14", "top right"),
        (-24, "fp16 smallest<br>subnormal 2^-24", "top left"),
    ):
        fig.add_vline(x=value - 0.5, line_dash="dash", row=1, col=2, annotation_text=name,
                      annotation_position=side, annotation_font_size=11)  # fmt: skip
    fig.update_xaxes(title_text="step", row=1, col=1)
    fig.update_xaxes(title_text="log2 |gradient|", row=1, col=2)
    fig.update_yaxes(title_text="loss", row=1, col=1)
    fig.update_yaxes(title_text="elements", type="log", row=1, col=2)
    fig.update_layout(height=420, title="Mixed precision: accuracy and fp16's range")
    return fig
