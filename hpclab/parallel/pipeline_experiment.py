"""Experiment ``pipeline``: naive vs GPipe vs 1F1B on p ranks, the bubble measured (chapter 06).

The model is a deep MLP like chapter 06's ``deep`` model (:func:`pipeline_model`: ``layers`` linear
layers of ``width`` features, 16x16 images flattened to 256 inputs so every layer has the same
cost), cut into ``stages`` stages by :func:`hpclab.parallel.pipeline.split_stages`. Every rank
first trains ``check_steps`` steps per schedule and the stages' weights are compared with one
process trained by :func:`hpclab.train.train_step` on the same batches (``max_diff_vs_serial``).
Then the schedules take turns, ``rounds`` times, ``steps`` timed steps each.

Per schedule: ``step_s`` (median over steps of the slowest rank), ``bubble_measured`` (mean over
ranks of the idle fraction of the step's span: time not inside a forward or backward pass,
receiving included; ``bubble_fastest_step``: the same for the least disturbed step) beside
``bubble_model`` = (p-1)/(m+p-1), and activation memory per rank
(bytes autograd saved for in-flight micro-batches). Records with ``kind="event"`` hold the
fastest step's timeline, ``kind="rank"`` the per-rank idle fractions (median over steps).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

import torch

from hpclab.config import Config, ConfigError, param
from hpclab.display import figure
from hpclab.dist import RankContext, launch
from hpclab.dist.placement import DEVICES
from hpclab.parallel.pipeline import (
    SCHEDULES,
    PipelineStage,
    bubble_model,
    flat_stage_params,
    idle_fractions,
    split_stages,
)
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.train import flat_params, make_model, synthetic_images, train_step

SIDE = 16  # 16x16 images: 256 inputs, as wide as the hidden layers
LR = 0.05
BATCHES = 4  # distinct batches, cycled


@dataclass(frozen=True)
class PipelineConfig(Config):
    stages: int = param(2, min=1, max=8, help="pipeline stages = ranks")
    micro_batches: int = param(8, min=1, max=128, help="micro-batches per batch (gpipe, 1f1b)")
    schedules: tuple = param(SCHEDULES, choices=SCHEDULES, help="schedules, side by side")
    batch_size: int = param(
        512, min=1, max=16384, log=True, quick=256, help="global batch per step"
    )
    layers: int = param(16, min=2, max=64, help="linear layers of the MLP")
    width: int = param(512, min=16, max=4096, log=True, quick=256, help="features per layer")
    steps: int = param(6, min=1, max=200, quick=3, help="timed steps per schedule and round")
    rounds: int = param(2, min=1, max=20, quick=1, help="interleaved rounds over the schedules")
    check_steps: int = param(2, min=1, max=20, help="steps of the equal-to-serial check")
    device: str = param("auto", choices=DEVICES, help="GPUs if enough, else CPU")

    def check(self) -> None:
        if self.batch_size % self.micro_batches:
            m, b = self.micro_batches, self.batch_size
            near = sorted({v for v in (b // m * m, (b // m + 1) * m) if v > 0})
            raise ConfigError(
                f"batch_size={b} is not divisible by micro_batches={m}; "
                f"nearest valid: {', '.join(map(str, near))}"
            )
        if self.stages > self.layers:
            raise ConfigError(
                f"stages={self.stages} exceeds layers={self.layers}; allowed: 1..{self.layers}"
            )


def pipeline_model(cfg: PipelineConfig, seed: int = 0) -> torch.nn.Sequential:
    """The registry's ``deep`` model: ``layers`` linear layers, ``width`` features each (ReLU
    between), 10 classes out."""
    return make_model("deep", SIDE * SIDE, 10, seed, depth=cfg.layers, width=cfg.width)


def pipeline_batch(cfg: PipelineConfig, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch number ``step`` (the same on every rank): X ``[batch, 256]``, y ``[batch]``."""
    x, y = synthetic_images(cfg.batch_size, (1, SIDE, SIDE), seed=step % BATCHES)
    return x.reshape(len(x), -1), y


def serial_params(cfg: PipelineConfig, steps: int) -> torch.Tensor:
    """One process, the whole model, the same batches: the weights the stages must reach."""
    model = pipeline_model(cfg)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for k in range(steps):
        train_step(model, opt, *pipeline_batch(cfg, k))
    return flat_params(model)


def pipeline_worker(ctx: RankContext, cfg: PipelineConfig) -> dict[str, Any]:
    stages = {}
    out: dict[str, Any] = {"rank": ctx.rank, "params": {}, "logs": {}}
    for kind in cfg.schedules:
        part = split_stages(pipeline_model(cfg), ctx.world_size)[ctx.rank]
        stage = PipelineStage(part, ctx.rank, ctx.world_size, LR, ctx.device)
        for k in range(cfg.check_steps):
            stage.step(*pipeline_batch(cfg, k), kind, cfg.micro_batches)
        out["params"][kind] = flat_stage_params(stage)
        stages[kind] = stage
        out["logs"][kind] = []
    total = cfg.rounds * len(stages)
    for rnd in range(cfg.rounds):
        for j, (kind, stage) in enumerate(stages.items()):
            stage.step(*pipeline_batch(cfg, 0), kind, cfg.micro_batches)  # warm-up
            for k in range(cfg.steps):
                log = stage.step(*pipeline_batch(cfg, k), kind, cfg.micro_batches)
                out["logs"][kind].append(log)
            ctx.progress(rnd * len(stages) + j + 1, total, f"round {rnd + 1}: {kind}")
    return out


def _schedule_records(cfg: PipelineConfig, kind: str, outs: list[dict]) -> list[dict[str, Any]]:
    p = len(outs)
    m = 1 if kind == "naive" else cfg.micro_batches
    steps = list(zip(*(o["logs"][kind] for o in outs), strict=True))  # per step: a log per rank
    idles = [idle_fractions([log.events for log in logs]) for logs in steps]
    step_times = [max(log.step_s for log in logs) for logs in steps]
    # the timeline shown is the fastest step's: load from other processes only adds idle time
    best = min(range(len(steps)), key=step_times.__getitem__)
    model = bubble_model(p, m)
    measured = statistics.median(statistics.fmean(i) for i in idles)
    base = {"schedule": kind, "stages": p, "micro_batches": m}
    records = [
        {
            "tier": "live",
            "kind": "schedule",
            **base,
            "batch_size": cfg.batch_size,
            "step_s": statistics.median(step_times),
            "bubble_measured": measured,
            "bubble_model": model,
            # the fastest step's: on a shared machine, load only ever adds idle time
            "bubble_fastest_step": statistics.fmean(
                idles[min(range(len(steps)), key=step_times.__getitem__)]
            ),
            "bubble_ratio": measured / model if model else None,
            "activation_peak_bytes": max(log.activation_peak_bytes for log in steps[best]),
            "max_in_flight": max(log.max_in_flight for log in steps[best]),
        }
    ]
    for r in range(p):
        log = steps[best][r]
        records.append(
            {
                "tier": "live",
                "kind": "rank",
                **base,
                "rank": r,
                "idle_fraction": statistics.median(i[r] for i in idles),
                "activation_peak_bytes": log.activation_peak_bytes,
                "max_in_flight": log.max_in_flight,
            }
        )
        for op, i, start, end in log.events:
            records.append(
                {
                    "tier": "live",
                    "kind": "event",
                    **base,
                    "rank": r,
                    "pass": op,
                    "micro_batch": i,
                    "start_s": start,
                    "end_s": end,
                }  # fmt: skip
            )
    return records


def check_memory(config: PipelineConfig, device: str, progress: Progress) -> None:
    """Refuse before starting when the stages and the serial check cannot fit in memory:
    parameters, gradients and optimizer state (16 bytes per parameter, the worst case) and
    every micro-batch's activations (kept until its backward), once in the stages and once in
    the serial reference."""
    from hpclab.measure.oom import preflight

    w, n = config.width, config.layers
    params = SIDE * SIDE * w + (n - 2) * w * w + w * 10
    activations = 2 * 4 * config.batch_size * w * n  # before and after each ReLU, fp32
    tensors = 2 * (16 * params + activations) if device == "cpu" else 0
    advice = "use fewer stages, layers or a smaller width or batch"
    preflight(f"a pipeline of {config.stages} stages", tensors, config.stages, advice, progress)


def run_pipeline(config: PipelineConfig, progress: Progress) -> Result:
    from hpclab.dist import place
    from hpclab.measure.sysinfo import usable_cores

    # more CPU ranks than cores still give the right weights, but ranks then take turns on the
    # cores and the measured idle time says more about the scheduler than about the pipeline
    where = place(config.stages, config.device)
    device = where.device
    check_memory(config, device, progress)
    oversubscribed = device == "cpu" and config.stages > usable_cores()
    outs = launch(
        pipeline_worker,
        config.stages,
        args=(config,),
        device=device,
        progress=progress,
        deadline_s=600.0,
    )
    serial = serial_params(config, config.check_steps)
    records = []
    for kind in dict.fromkeys(config.schedules):
        recs = _schedule_records(config, kind, outs)
        mine = torch.cat([o["params"][kind] for o in outs])
        recs[0]["max_diff_vs_serial"] = float((mine - serial).abs().max())
        # "device": where rank 0 ran, a torch device string, as in every record of the library
        recs[0]["device"], recs[0]["oversubscribed"] = where.devices[0], oversubscribed
        records += recs
    steps = {r["schedule"]: r["step_s"] for r in records if r["kind"] == "schedule"}
    for r in records:
        if r["kind"] == "schedule" and "naive" in steps:
            r["speedup_vs_naive"] = steps["naive"] / r["step_s"]
    return make_result("pipeline", config, records)


@figure
def plot_pipeline(result: Result):
    """Per-rank timeline of each schedule's fastest step: forward, backward, and the gaps."""
    from plotly.subplots import make_subplots

    from hpclab.timeline import add_spans

    rows = [r for r in result.records if r.get("kind") == "schedule"]
    fig = make_subplots(
        rows=len(rows),
        cols=1,
        vertical_spacing=0.08,
        subplot_titles=[
            f"{r['schedule']} (m={r['micro_batches']}): median step {r['step_s'] * 1e3:.1f} ms; "
            f"bubble {r['bubble_fastest_step']:.0%} in the step shown (median "
            f"{r['bubble_measured']:.0%}), model {r['bubble_model']:.0%}"
            for r in rows
        ],
    )
    colors = {"F": "#4c78a8", "B": "#f58518"}
    for k, sched in enumerate(rows, start=1):
        events = [
            e
            for e in result.records
            if e.get("kind") == "event" and e["schedule"] == sched["schedule"]
        ]
        for op, label in (("F", "forward"), ("B", "backward")):
            mine = [e for e in events if e["pass"] == op]
            add_spans(
                fig,
                [f"rank {e['rank']}" for e in mine],
                [e["start_s"] * 1e3 for e in mine],
                [(e["end_s"] - e["start_s"]) * 1e3 for e in mine],
                name=label,
                color=colors[op],
                text=[str(e["micro_batch"]) for e in mine],
                hover="micro-batch %{text}: from %{base:.2f} ms, %{x:.2f} ms long<extra></extra>",
                legendgroup=op,
                showlegend=k == 1,
                row=k,
                col=1,
            )
        fig.update_yaxes(autorange="reversed", row=k, col=1)
    fig.update_xaxes(title="ms since the step started (white space: idle)", row=len(rows), col=1)
    fig.update_xaxes(rangemode="tozero")
    fig.update_layout(
        title="Pipeline schedules: what each rank does during one step",
        barmode="overlay",
        height=200 + 160 * len(rows),
    )
    return fig
