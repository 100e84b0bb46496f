"""Experiment ``checkpointing``: activation memory saved vs time spent recomputing (chapter 09).

The registry's ``deep`` MLP trains with its activations checkpointed in segments of ``k`` blocks
(:class:`hpclab.train.Checkpointed`): per policy (``none``, ``every block`` = 1, and each ``k``
asked for) the records hold the bytes forward keeps for backward (``activation_bytes``, measured
by the allocator probe), the step's peak, the median step time, and the model's figures
(:func:`hpclab.memory.model.checkpointed_activations`, :func:`~hpclab.memory.model.peak`).
Chen et al. 2016: segments of about sqrt(L) of L blocks keep O(sqrt L) activations for about
one extra forward pass (a step is ~1 forward + 2 forwards' worth of backward: ~+33%).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hpclab.config import Config, ConfigError, param
from hpclab.display import figure
from hpclab.dist import RankContext
from hpclab.measure.timing import time_fn
from hpclab.memory.anatomy import batch, measure, modelled
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.train import Checkpointed, make_model, run_spec, train_step
from hpclab.train.optim import make_optimizer


@dataclass(frozen=True)
class CheckpointingConfig(Config):
    depth: int = param(16, min=2, max=64, help="linear layers = blocks")
    width: int = param(256, min=8, max=8192, log=True, quick=128, help="features per layer")
    batch_size: int = param(
        2048,
        min=1,
        max=16384,
        log=True,
        quick=1024,
        help="samples per step (activations grow with it, weights do not)",
    )
    side: int = param(28, min=4, max=64, help="images are side x side")
    every: tuple = param((1, 4), min=1, max=64, help="blocks per checkpointed segment to try")
    steps: int = param(8, min=3, max=1000, quick=3, help="timed steps per policy")

    def check(self) -> None:
        for k in self.every:
            if k > self.depth:
                raise ConfigError(
                    f"every={k} is larger than depth={self.depth} blocks; allowed: 1..{self.depth}"
                )


def policy(every: int | None) -> str:
    return "none" if every is None else "every block" if every == 1 else f"every {every} blocks"


def step_seconds(cfg: CheckpointingConfig, every: int | None, device: str) -> float:
    model = make_model("deep", cfg.side**2, depth=cfg.depth, width=cfg.width).to(device)
    model = model if every is None else Checkpointed(model, every)
    opt = make_optimizer("sgd", model.parameters(), 1e-3)
    x, y = batch(cfg, device)
    t = time_fn(lambda: train_step(model, opt, x, y), device=device, warmup=1,
                repeat=cfg.steps, max_time_s=math.inf)  # fmt: skip
    return t.median_s


def checkpointing_worker(ctx: RankContext, cfg: CheckpointingConfig) -> list[dict[str, Any]]:
    rows = []
    policies = [None, *sorted(set(cfg.every))]
    for i, every in enumerate(policies):
        ctx.progress(i, len(policies), policy(every))
        got = measure(cfg, cfg.width, ctx.device, every=every)
        want = modelled(cfg, cfg.width, every=every)
        rows.append({
            "policy": policy(every), "every": every or 0, "activation_bytes": got["activations"],
            "model_activation_bytes": want["activations"], "peak_bytes": got["peak"],
            "model_peak_bytes": want["peak"], "step_s": step_seconds(cfg, every, ctx.device),
        })  # fmt: skip
    return rows


def run_checkpointing(config: CheckpointingConfig, progress: Progress) -> Result:
    rows = run_spec(config, 1, worker=checkpointing_worker, device="cpu", progress=progress)[0]
    base = rows[0]["step_s"]
    records = [{"tier": "live", **r, "time_ratio": r["step_s"] / base} for r in rows]
    return make_result("checkpointing", config, records)


@figure
def plot_checkpointing(result: Result):
    """Bytes kept for backward and the peak per policy (bars, model as markers); step time."""
    from plotly.subplots import make_subplots

    rows = result.records
    names = [r["policy"] for r in rows]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("memory (MiB)", "step time (x none)"))
    for key, name in (("activation_bytes", "activations kept"), ("peak_bytes", "step peak")):
        fig.add_bar(x=names, y=[r[key] / 2**20 for r in rows], name=f"{name} (measured)",
                    row=1, col=1)  # fmt: skip
        fig.add_scatter(x=names, y=[r[f"model_{key}"] / 2**20 for r in rows], mode="markers",
                        name=f"{name} (model)", marker={"symbol": "x", "size": 11},
                        row=1, col=1)  # fmt: skip
    fig.add_bar(x=names, y=[r["time_ratio"] for r in rows], name="step time", row=1, col=2)
    cfg = result.config
    fig.update_layout(barmode="group", height=420,
                      title=f"Activation checkpointing: {cfg['depth']} blocks of width "
                      f"{cfg['width']}, batch {cfg['batch_size']}")  # fmt: skip
    return fig
