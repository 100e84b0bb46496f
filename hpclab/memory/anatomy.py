"""Experiment ``memory-anatomy``: where a training step's bytes go, measured vs modelled (ch. 09).

For each model size (the registry's ``deep`` MLP at each ``width``) one rank trains two steps of
the engine's step under the allocator probe (:mod:`hpclab.memory.probe`) and reports, per part
(parameters, gradients, optimizer state, activations, and the peak of the step), the bytes
measured beside the bytes of the model (:mod:`hpclab.memory.model`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from hpclab.config import Config, param
from hpclab.display import figure
from hpclab.dist import RankContext
from hpclab.memory import model as bytes_model
from hpclab.memory.probe import anatomy, step_timeline
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.train import make_model, run_spec, synthetic_images
from hpclab.train.optim import OPTIMIZERS, make_optimizer

PARTS = ("params", "grads", "optimizer", "activations", "peak")


@dataclass(frozen=True)
class AnatomyConfig(Config):
    widths: tuple = param((256, 512, 1024), min=8, max=8192, quick=(128, 256),
                          help="model sizes: features per hidden layer")  # fmt: skip
    depth: int = param(8, min=2, max=64, help="linear layers")
    batch_size: int = param(256, min=1, max=16384, log=True, quick=64, help="samples per step")
    side: int = param(28, min=4, max=64, help="images are side x side")
    optimizer: str = param("adam", choices=OPTIMIZERS, help="optimizer")
    dtype: str = param("fp32", choices=("fp32", "bf16", "fp16"), help="training precision")
    device: str = param("cpu", choices=("auto", "cpu", "cuda"), help="where the step runs")


def batch(cfg: Any, device: str) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of MNIST-like images, flattened: ``[batch_size, side*side]``, labels ``[batch]``."""
    x, y = synthetic_images(cfg.batch_size, (1, cfg.side, cfg.side), seed=0)
    return x.reshape(len(x), -1).to(device), y.to(device)


def measure(cfg: Any, width: int, device: str, *, every: int | None = None) -> dict[str, int]:
    """One configuration's parts, measured by the probe (two steps of the engine's step)."""
    from hpclab.train import Checkpointed

    x, y = batch(cfg, device)

    def build():
        m = make_model("deep", cfg.side**2, depth=cfg.depth, width=width)
        return m if every is None else Checkpointed(m, every)

    opt = getattr(cfg, "optimizer", "sgd")
    dtype = getattr(cfg, "dtype", "fp32")
    timeline = step_timeline(build, lambda p: make_optimizer(opt, p, 1e-3), x, y, dtype=dtype)
    return anatomy(timeline)


def modelled(cfg: Any, width: int, *, every: int | None = None) -> dict[str, int]:
    """The same parts from the byte model."""
    m = bytes_model.MLP(cfg.side**2, width, cfg.depth, cfg.batch_size)
    opt, dtype = getattr(cfg, "optimizer", "sgd"), getattr(cfg, "dtype", "fp32")
    out = bytes_model.parts(m, opt, dtype)
    if every is not None:
        out["activations"] = bytes_model.checkpointed_activations(m, every)
    out["peak"] = bytes_model.peak(m, opt, dtype, every)
    return out


def anatomy_worker(ctx: RankContext, cfg: AnatomyConfig) -> list[dict[str, Any]]:
    rows = []
    for i, width in enumerate(cfg.widths):
        ctx.progress(i, len(cfg.widths), f"width {width}")
        got, want = measure(cfg, width, ctx.device), modelled(cfg, width)
        params = bytes_model.MLP(cfg.side**2, width, cfg.depth, cfg.batch_size).params
        for part in PARTS:
            rows.append({"width": width, "params_count": params, "part": part,
                         "measured_bytes": got[part], "model_bytes": want[part]})  # fmt: skip
    return rows


def run_anatomy(config: AnatomyConfig, progress: Progress) -> Result:
    rows = run_spec(config, 1, worker=anatomy_worker, device=config.device, progress=progress)[0]
    records = [{"tier": "live", "optimizer": config.optimizer, "dtype": config.dtype, **r}
               for r in rows]  # fmt: skip
    return make_result("memory-anatomy", config, records)


@figure
def plot_anatomy(result: Result):
    """Stacked measured bytes per part for each model size; the model's peak as a marker."""
    import plotly.graph_objects as go

    rows = result.records
    sizes = sorted({r["width"] for r in rows})
    label = {w: f"width {w}" for w in sizes}
    fig = go.Figure()
    for part in PARTS[:-1]:
        mine = {r["width"]: r for r in rows if r["part"] == part}
        fig.add_bar(x=[label[w] for w in sizes], y=[mine[w]["measured_bytes"] / 2**20 for w in sizes],
                    name=f"{part} (measured)")  # fmt: skip
    for part, symbol, color in (("peak", "line-ew-open", "black"), ("peak", "x", "crimson")):
        mine = {r["width"]: r for r in rows if r["part"] == part}
        key = "model_bytes" if symbol == "x" else "measured_bytes"
        fig.add_scatter(
            x=[label[w] for w in sizes], y=[mine[w][key] / 2**20 for w in sizes], mode="markers",
            name="peak (model)" if key == "model_bytes" else "peak (measured)",
            marker={"symbol": symbol, "size": 40 if symbol != "x" else 12, "color": color},
        )  # fmt: skip
    cfg = result.config
    fig.update_layout(
        barmode="stack", yaxis_title="MiB", height=420,
        title=f"One training step's memory: {cfg['depth']} layers, batch {cfg['batch_size']}, "
        f"{cfg['optimizer']}, {cfg['dtype']}<br><sup>bars measured; the peak is more than the "
        "parts alive at the end of the step (gradients in flight)</sup>",
    )  # fmt: skip
    return fig
