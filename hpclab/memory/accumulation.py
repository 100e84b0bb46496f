"""Experiment ``accumulation``: k micro-batches equal one large batch, for one all-reduce (ch. 09).

Gradient accumulation runs forward and backward on ``k`` micro-batches of ``B/k`` samples and
updates once: the gradients add up in ``.grad`` (each micro-batch's loss weighted by its share),
so the update equals the one of the whole batch, while only one micro-batch's activations are
alive at a time. Under data parallelism the engine's step (:func:`hpclab.train.train_step`)
runs every micro-batch but the last under DDP's ``no_sync``: the gradients are all-reduced once
per step, not once per micro-batch. A DDP communication hook counts the all-reduces here.

Records per ``micro_batches``: ``allreduces_per_step`` (buckets all-reduced per step, counted),
``max_diff_vs_one_batch`` (largest weight difference after ``steps`` steps against the run with
the whole batch at once) and ``activation_bytes`` of one micro-batch (the allocator probe).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch

from hpclab.config import Config, ConfigError, param
from hpclab.dist import RankContext
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.train import flat_params, make_model, run_spec, synthetic_images, train_step, wrap

TOLERANCE = 1e-5  # fp32 sums in another order: equal to rounding, far below one step's change


@dataclass(frozen=True)
class AccumulationConfig(Config):
    ranks: int = param(2, min=1, max=16, help="data-parallel ranks")
    micro_batches: tuple = param((1, 2, 4, 8), min=1, max=256, help="micro-batches per step")
    batch_size: int = param(64, min=1, max=8192, log=True, help="samples per step per rank")
    steps: int = param(5, min=1, max=1000, help="training steps")
    lr: float = param(0.05, min=1e-6, max=10.0, log=True, help="SGD learning rate")

    def check(self) -> None:
        for k in self.micro_batches:
            if self.batch_size % k:
                raise ConfigError(f"micro_batches={k} does not divide batch_size="
                                  f"{self.batch_size}; allowed: a divisor of the batch")  # fmt: skip


def _train(ctx: RankContext, cfg: AccumulationConfig, k: int) -> tuple[torch.Tensor, float]:
    """``steps`` steps with ``k`` micro-batches; (the weights, all-reduces per step)."""
    x, y = synthetic_images(cfg.batch_size * ctx.world_size * cfg.steps, (1, 8, 8), seed=1)
    x = x.reshape(len(x), -1)
    model = make_model("large", 64, seed=0)
    net = wrap(ctx, model, 100.0)  # one bucket: the whole gradient in one all-reduce
    calls = [0]
    if ctx.distributed:
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        def counted(state, bucket):
            calls[0] += 1
            return allreduce_hook(state, bucket)

        net.register_comm_hook(None, counted)
    opt = torch.optim.SGD(net.parameters(), lr=cfg.lr)
    per = cfg.batch_size
    for s in range(cfg.steps):
        lo = (s * ctx.world_size + ctx.rank) * per  # this rank's share of step s's global batch
        train_step(net, opt, x[lo : lo + per], y[lo : lo + per], micro_batches=k)
    return flat_params(model), calls[0] / cfg.steps


def accumulation_worker(ctx: RankContext, cfg: AccumulationConfig) -> list[dict[str, Any]]:
    from hpclab.memory.anatomy import measure

    one_batch, _ = _train(ctx, cfg, 1)
    rows = []
    for k in cfg.micro_batches:
        weights, calls = _train(ctx, cfg, k)
        probe = SimpleNamespace(depth=3, batch_size=cfg.batch_size // k, side=8)
        rows.append({
            "micro_batches": k, "micro_batch_size": cfg.batch_size // k,
            "allreduces_per_step": calls,
            "max_diff_vs_one_batch": float((weights - one_batch).abs().max()),
            "activation_bytes": measure(probe, 1024, "cpu")["activations"] if ctx.rank == 0 else 0,
        })  # fmt: skip
    return rows


def run_accumulation(config: AccumulationConfig, progress: Progress) -> Result:
    rows = run_spec(config, config.ranks, worker=accumulation_worker, device="cpu",
                    progress=progress)[0]  # fmt: skip
    records = [{"tier": "live", "ranks": config.ranks, "tolerance": TOLERANCE, **r} for r in rows]
    return make_result("accumulation", config, records)
