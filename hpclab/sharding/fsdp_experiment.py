"""Experiment ``fsdp``: DDP beside ZeRO-1, -2 and -3 on N ranks (chapter 09, part 2).

Every rank builds the same model (same seed) once per strategy (:mod:`hpclab.sharding.wrappers`),
trains it on the same batches (its ``DistributedSampler`` share) with Adam through the one step
:func:`hpclab.train.train_step`, and reports, per strategy:

- ``params_max_diff_vs_ddp``: the whole parameters after ``warmup + 2 + steps`` steps against
  DDP's (sharding changes where state lives, not the arithmetic: fp32 differences stay at
  rounding level), beside ``params_max_diff_floor``: DDP against DDP with the ranks' gradients
  summed in another order (:mod:`hpclab.sharding.floor`; 0 below 3 ranks, where there is none),
  and ``weights_equal_to_ddp`` (:func:`hpclab.sharding.floor.equal_weights`: within 1e-5 or
  10x the floor);
- ``init`` (``full``: built whole, then sharded; ``meta``: FSDP2 built from the meta device,
  :mod:`hpclab.sharding.meta_init`), ``build_peak_bytes_per_rank`` (the most bytes a rank held
  while building) and ``init_max_diff_vs_full`` (the built weights against the model built whole);
- ``state_bytes_per_rank``: parameters + gradients + optimizer state one rank holds between
  steps (:func:`hpclab.sharding.probe.state_bytes`), and ``model_state_bytes`` from
  :func:`hpclab.sharding.planner.state_bytes` (fp32 Adam: 4 + 4 + 8 bytes a parameter);
- ``peak_bytes_per_rank``: the most bytes alive at once during one probed step
  (:class:`hpclab.sharding.probe.StepProbe`), activations and gathered parameters included;
- ``comm_bytes_per_step``: what one rank sends in that step, from each collective's payload
  (chapter 06's :class:`~hpclab.parallel.tensor_parallel.CommTally`, counted as a ring of the
  collective's group sends it), beside ``model_comm_bytes`` (2 (N-1)/N x 4P for DDP, ZeRO-1 and
  -2; 3 (N-1)/N x 4P for ZeRO-3: :mod:`hpclab.sharding.comm_model`); split into
  ``comm_bytes_intra_node`` and ``comm_bytes_inter_node`` by the process group each collective
  ran on (a group with ranks of two nodes is inter-node), with the model's split beside;
- ``hsdp`` (HSDP): ``nodes`` replicas of ``ranks / nodes`` shards. ``launch="local"`` runs all
  ranks on this machine, rank r standing for a GPU of node r // (ranks / nodes);
  ``launch="slurm"`` runs them on chapter 07's cluster, one torchrun per node
  (:class:`hpclab.cluster.multinode.Torchrun`), so the inter-node groups really span nodes;
- ``step_s``: the median of ``steps`` timed steps (:func:`hpclab.measure.timing.time_fn`).

The model is chapter 06's ``deep`` MLP (``depth`` linear layers of ``width``), so its size is
a slider. On CPU ranks the backend is gloo: on this torch (2.13) gloo runs reduce-scatter and
all-gather natively and averages correctly with ``ReduceOp.AVG``; the library still sums and
divides, which is right on every backend.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from typing import Any

from hpclab.config import Config, ConfigError, param
from hpclab.dist import RankContext
from hpclab.measure.timing import time_fn
from hpclab.parallel.tensor_parallel import CommTally
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.sharding.comm_model import check_nodes, comm_bytes, shard_ranks, spans_nodes
from hpclab.sharding.floor import equal_weights, floor_params
from hpclab.sharding.fsdp_plots import plot_fsdp, plot_state_vs_ranks
from hpclab.sharding.meta_init import INITS, SHARDED, build_model
from hpclab.sharding.planner import state_bytes as model_state
from hpclab.sharding.probe import StepProbe, state_bytes, state_tensors
from hpclab.sharding.wrappers import DEFAULT_STRATEGIES, STAGE, STRATEGIES, full_params
from hpclab.train import TrainSpec, batches, dataset, flat_params, make_model, run_spec
from hpclab.train.step import train_step

LAUNCHES = ("local", "slurm")
BYTES_FP32_ADAM = 16  # 4 parameter + 4 gradient + 8 Adam (two moments), all fp32


@dataclass(frozen=True)
class FsdpConfig(Config):
    strategy: tuple = param(
        DEFAULT_STRATEGIES, choices=STRATEGIES, help="strategies, side by side (ddp is stage 0)"
    )
    ranks: int = param(2, min=1, max=16, help="ranks (CPU processes standing in for GPUs)")
    width: int = param(512, min=16, max=4096, log=True, quick=256, help="hidden width")
    depth: int = param(8, min=2, max=64, help="linear layers")
    batch_size: int = param(32, min=1, max=1024, log=True, help="batch per rank")
    steps: int = param(10, min=1, max=200, quick=6, help="timed steps (after warm-up)")
    warmup: int = param(2, min=1, max=20, help="untimed steps first")
    lr: float = param(1e-3, min=1e-6, max=1.0, log=True, help="Adam learning rate")
    nodes: int = param(1, min=1, max=16, help="nodes the ranks fill (hsdp: one replica each)")
    launch: str = param(
        "local", choices=LAUNCHES, help="local: ranks here, nodes stood for; slurm: chapter 07's"
    )
    init: str = param(
        "full", choices=INITS, help="full: build whole, then shard; meta: FSDP2 builds only shards"
    )

    def check(self) -> None:
        try:
            check_nodes(self.ranks, self.nodes)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        params = _params(self)
        need = BYTES_FP32_ADAM * params * self.ranks * 2  # every rank: state + a gathered copy
        from hpclab.compute.device import ensure_fits

        try:
            ensure_fits(need, "cpu", f"{params / 1e6:.1f} M parameters on {self.ranks} ranks")
        except ConfigError as err:
            raise ConfigError(f"{err} (estimate: {BYTES_FP32_ADAM} bytes a parameter)") from None


SIDE = 28  # MNIST-sized synthetic images, 784 features


def _params(cfg: FsdpConfig) -> int:
    """Parameters of the ``deep`` MLP, counted without building it (a refused size may not fit)."""
    w, d_in, classes = cfg.width, SIDE * SIDE, 10
    return (d_in + 1) * w + (cfg.depth - 2) * (w + 1) * w + (w + 1) * classes


def _spec(cfg: FsdpConfig) -> TrainSpec:
    return TrainSpec.sized(
        cfg.ranks,
        model="deep",
        side=SIDE,
        per_rank_batch=cfg.batch_size,
        steps=cfg.steps,
        warmup=cfg.warmup,
        lr=cfg.lr,
        optimizer="adam",
    )


def _model(cfg: FsdpConfig, spec: TrainSpec):
    return make_model("deep", SIDE * SIDE, seed=spec.seed, depth=cfg.depth, width=cfg.width)


def _one(ctx: RankContext, spec: TrainSpec, strategy: str, cfg: FsdpConfig) -> dict[str, Any]:
    shape = {"features": SIDE * SIDE, "depth": cfg.depth, "width": cfg.width, "nodes": cfg.nodes}
    net, opt, build_peak = build_model(strategy, cfg.init, ctx, spec, **shape)
    whole = full_params(net)  # a collective: every rank; against the model built whole
    init_diff = float((whole - flat_params(_model(cfg, spec))).abs().max()) if ctx.rank == 0 else 0
    stream = batches(ctx, spec, dataset(spec))
    taken = []

    def step() -> None:
        train_step(net, opt, *next(stream))
        taken.append(1)

    for _ in range(spec.warmup):
        step()
    ctx.barrier()
    held = state_tensors(net, opt)
    before = state_bytes(held)
    tally = CommTally()
    with StepProbe(tally, held) as probe:
        step()
    after = state_bytes(state_tensors(net, opt))
    timing = time_fn(step, device=ctx.device, warmup=0, repeat=spec.steps, max_time_s=float("inf"))
    per_node = ctx.world_size // cfg.nodes
    sent = probe.sent_by_group()
    inter = sum(b for g, b in sent.items() if spans_nodes(g, per_node))
    return {
        "rank": ctx.rank,
        # the Slurm node this rank ran on (under srun), else this machine's name
        "host": os.environ.get("SLURMD_NODENAME") or platform.node(),
        "state_bytes_per_rank": after,
        "state_bytes_before": before,
        "peak_bytes_per_rank": probe.peak,
        "comm_bytes_per_step": sum(sent.values()),
        "comm_bytes_inter_node": inter,
        "comm_bytes_intra_node": sum(sent.values()) - inter,
        "comm_calls": dict(tally.calls),
        "comm_payload_bytes": dict(tally.payload_bytes),
        "step_s": timing.median_s,
        "step_s_iqr": timing.iqr_s,
        "params": full_params(net),
        "steps_taken": len(taken),
        "init": cfg.init if strategy in SHARDED else "full",
        "build_peak_bytes_per_rank": build_peak,
        "init_max_diff_vs_full": init_diff,
    }


def fsdp_worker(ctx: RankContext, spec: TrainSpec, cfg: FsdpConfig) -> list[dict[str, Any]]:
    """Each strategy in turn on this rank; DDP first, always (the reference)."""
    order = ["ddp"] + [s for s in cfg.strategy if s != "ddp"]
    out = []
    for k, strategy in enumerate(order):
        ctx.progress(k, len(order), strategy)
        row = _one(ctx, spec, strategy, cfg)
        if ctx.rank != 0:
            row.pop("params")
        out.append({"strategy": strategy, **row})
    # DDP again, the ranks' gradients summed in reverse: how far two orders of a sum end apart
    again = floor_params(ctx, spec, lambda: _model(cfg, spec), batches(ctx, spec, dataset(spec)),
                         out[0]["steps_taken"])  # fmt: skip
    if ctx.rank == 0:
        out[0]["floor_params"] = again
    return out


def run_fsdp(config: FsdpConfig, progress: Progress) -> Result:
    from hpclab.dist import place
    from hpclab.measure.sysinfo import usable_cores

    spec = _spec(config)
    job, where = None, {}
    if config.launch == "slurm":  # chapter 07's path: srun one torchrun per node
        from hpclab.cluster import local
        from hpclab.cluster.multinode import Torchrun
        from hpclab.cluster.runner import require_cluster

        cluster = require_cluster()
        job = Torchrun(cluster, local.site_profile(cluster), config.nodes,
                       config.ranks // config.nodes)  # fmt: skip
        where = {"launch": job, "deadline": 300.0}
    outs = run_spec(spec, config.ranks, worker=fsdp_worker, args=(config,), device="cpu",
                    progress=progress, **where)  # fmt: skip
    if job is not None:
        note = f"{config.nodes} Slurm nodes x {config.ranks // config.nodes} ranks (job {job.jobs[-1]})"
    else:
        note = place(config.ranks, "cpu").note
        if config.nodes > 1:
            note += (f"; {config.nodes} nodes stood for on this machine: ranks "
                     f"0-{config.ranks // config.nodes - 1} are node 0, and so on")  # fmt: skip
    params = _params(config)
    ref = outs[0][0]["params"]
    again = outs[0][0]["floor_params"]  # None below 3 ranks: no other order of the sum
    floor = 0.0 if again is None else float((again - ref).abs().max())
    records = []
    for k, row in enumerate(outs[0]):
        strategy = row["strategy"]
        if strategy not in config.strategy:
            continue
        per_rank = [o[k] for o in outs]
        # Rajbhandari et al. 2020 §7, and HSDP's split: fp32 weights and gradients
        model_comm = comm_bytes(strategy, params, config.ranks, config.nodes)
        shards = shard_ranks(strategy, config.ranks, config.nodes)
        diff = float((row["params"] - ref).abs().max())
        records.append(
            {
                "tier": "live",
                "strategy": strategy,
                "stage": STAGE[strategy],
                "ranks": config.ranks,
                "nodes": config.nodes,
                "params": params,
                "state_bytes_per_rank": max(r["state_bytes_per_rank"] for r in per_rank),
                "model_state_bytes": model_state(params, shards, STAGE[strategy], "fp32")["total"],
                "peak_bytes_per_rank": max(r["peak_bytes_per_rank"] for r in per_rank),
                "comm_bytes_per_step": row["comm_bytes_per_step"],
                "model_comm_bytes": model_comm["total"],
                "comm_bytes_intra_node": row["comm_bytes_intra_node"],
                "comm_bytes_inter_node": row["comm_bytes_inter_node"],
                "model_comm_bytes_intra_node": model_comm["intra_node"],
                "model_comm_bytes_inter_node": model_comm["inter_node"],
                "comm_calls": row["comm_calls"],
                "step_s": max(r["step_s"] for r in per_rank),
                "step_s_iqr": row["step_s_iqr"],
                "params_max_diff_vs_ddp": diff,
                "params_max_diff_floor": floor,
                "weights_equal_to_ddp": equal_weights(diff, floor),
                "init": row["init"],
                "build_peak_bytes_per_rank": max(r["build_peak_bytes_per_rank"] for r in per_rank),
                "init_max_diff_vs_full": row["init_max_diff_vs_full"],
                "device": "cpu",
                "oversubscribed": config.launch == "local" and config.ranks > usable_cores(),
                "placement": note,
                "hosts": ",".join(sorted({r["host"] for r in per_rank})),
            }
        )
    return make_result("fsdp", config, records, ran_elsewhere=config.launch == "slurm")


__all__ = ["FsdpConfig", "fsdp_worker", "plot_fsdp", "plot_state_vs_ranks", "run_fsdp"]
