"""Experiment ``ddp``: real DistributedDataParallel runs, measured (chapter 06).

A run trains one :class:`hpclab.train.TrainSpec` on ``ranks`` ranks of :func:`hpclab.train.ddp_worker` (NCCL with one GPU per
rank, else gloo CPU ranks standing in for GPUs) and, as the baseline, one rank with the same
threads as each of them (so "one GPU" and "each of n GPUs" have the same power). Records:

- ``step_s``: median step time (rank 0), ``compute_s``: the same step without communication
  (slowest rank), ``comm_s = step_s - compute_s``: communication plus waiting for peers;
- ``samples_per_s`` (global batch / step) and ``efficiency`` = samples/s on n ranks /
  (n x samples/s of the baseline);
- a ``model`` record: the one-rank step shared out (strong) or repeated (weak) + one measured
  all-reduce of the gradient bytes (no overlap): its efficiency stays below 1.

Weak scaling keeps ``batch_size`` per rank; strong scaling splits a global ``batch_size``.

With ``target_acc`` > 0 each run trains the teacher task to that validation accuracy instead of
timing fixed steps (:mod:`hpclab.ddp.time_to_accuracy`): the records add steps, epochs, time and
core-hours to the target beside samples/s, and the model record predicts the time to target
from the modelled step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from hpclab.compute.mfu import mfu_fields
from hpclab.config import Config, ConfigError, param
from hpclab.ddp.time_to_accuracy import target_fields, target_spec
from hpclab.display import plural
from hpclab.dist.placement import DEVICES, gpu_count, place
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.train import MODELS, TrainSpec, ddp_worker, run_spec, target_worker
from hpclab.train.optim import LR_RULES


@dataclass(frozen=True)
class DDPConfig(Config):
    ranks: int = param(2, min=1, max=64, help="ranks (GPUs, or CPU processes standing in for them)")
    batch_size: int = param(
        64, min=1, max=65536, log=True, help="batch per rank (weak) or global batch (strong)"
    )
    model: str = param(
        "tiny",
        choices=tuple(MODELS),
        help="hpclab.train model: tiny, large (>10x tiny), deep (many tensors), cnn",
    )
    scaling: str = param("weak", choices=("weak", "strong"), help="keep per-rank or global batch")
    steps: int = param(30, min=1, max=10000, quick=8, help="timed steps")
    warmup: int = param(3, min=1, max=100, quick=2, help="untimed steps before timing")
    bucket_cap_mb: float = param(25.0, min=0.0, max=1024.0, help="DDP bucket size (0: per tensor)")
    micro_batches: int = param(1, min=1, max=64, help="gradient accumulation chunks per step")
    device: str = param(
        "auto", choices=DEVICES, help="auto: one GPU per rank if there are enough, else CPU ranks"
    )
    baseline: bool = param(True, help="also run one rank, for the efficiency")
    seed: int = param(0, min=0, max=2**31 - 1, help="data, shuffle and weight seed")
    target_acc: float = param(
        0.0, min=0.0, max=1.0, help="train the teacher task to this validation accuracy (0: off)"
    )
    lr: float = param(0.05, min=1e-4, max=100.0, log=True, help="learning rate (at one rank)")
    lr_rule: str = param(
        "none", choices=LR_RULES, help="rate as the global batch grows from one rank's batch"
    )
    warmup_epochs: float = param(0.0, min=0.0, max=100.0, help="linear warm-up (target runs)")
    max_epochs: float = param(10.0, min=0.1, max=1000.0, quick=4.0, help="target runs stop here")

    def check(self) -> None:
        if self.warmup_epochs > self.max_epochs:
            raise ConfigError(
                f"warmup_epochs={self.warmup_epochs:g} is longer than the run (max_epochs="
                f"{self.max_epochs:g}); allowed: warmup_epochs <= max_epochs"
            )
        if self.scaling == "strong" and self.batch_size % self.ranks:
            lo = self.batch_size // self.ranks * self.ranks
            near = sorted({v for v in (lo, lo + self.ranks) if v > 0})
            raise ConfigError(
                f"batch_size={self.batch_size} is not divisible by ranks={self.ranks} "
                f"(strong scaling splits it); nearest valid: {', '.join(map(str, near))}"
            )
        per_rank = self.per_rank_batch
        if per_rank * self.ranks > 65536:
            raise ConfigError(
                f"batch_size={self.batch_size} gives a global batch of {per_rank * self.ranks}; "
                "allowed: global batch <= 65536"
            )
        if self.micro_batches > per_rank:
            raise ConfigError(
                f"micro_batches={self.micro_batches} exceeds the per-rank batch {per_rank}; "
                f"allowed: 1..{per_rank}"
            )

    @property
    def per_rank_batch(self) -> int:
        return self.batch_size if self.scaling == "weak" else self.batch_size // self.ranks


def launch_spec(ranks: int, spec: TrainSpec, device: str, threads: int, progress: Progress):
    """Run ``spec`` on ``ranks`` ranks (to its target when it has one); returns (per-rank
    outputs, launch wall time)."""
    started = time.time()  # the "button press": includes run_spec's one-time preload
    worker = target_worker if spec.target_acc else ddp_worker
    outs = run_spec(spec, ranks, worker=worker, device=device, threads=threads, progress=progress)
    return outs, started


def _record(cfg: DDPConfig, ranks: int, outs: list[dict], started: float) -> dict[str, Any]:
    r0 = outs[0]
    step = r0["step_s"]
    compute = max(o["compute_s"] for o in outs)
    per_rank = cfg.per_rank_batch if ranks > 1 or cfg.scaling == "weak" else cfg.batch_size
    global_batch = per_rank * ranks
    return {
        "tier": "live",
        "ranks": ranks,
        "model": cfg.model,
        "scaling": cfg.scaling,
        "device": r0["device"],
        "backend": r0["backend"],
        "threads_per_rank": r0["threads"],
        "params": r0["params"],
        "global_batch": global_batch,
        "per_rank_batch": per_rank,
        "step_s": step,
        "step_s_iqr": r0["step_s_iqr"],
        "compute_s": compute,
        "comm_s": max(0.0, step - compute),
        "allreduce_s": r0["allreduce_s"],
        "samples_per_s": global_batch / step,
        "buckets": r0["buckets"],
        "params_max_diff": max(o["params_max_diff"] for o in outs),
        "loss_last": r0["loss_last"],
        "startup_s": r0["first_step_at"] - started,
        # model FLOPs utilisation over every rank's cores or GPUs (chapter 01)
        **mfu_fields(
            r0["flops_per_sample"],
            global_batch / step,
            r0["device"],
            threads=r0["threads"],
            devices=ranks,
        ),  # noqa: E501
    }


def train_spec(config: DDPConfig) -> TrainSpec:
    """What each rank trains: the one spec a run and its references share (the plain loop of
    ``benchmarks/ddp_gpu.py`` trains this very spec, so both do the same work)."""
    return TrainSpec.sized(
        config.ranks,
        model=config.model,
        per_rank_batch=config.per_rank_batch,
        steps=config.steps,
        warmup=config.warmup,
        seed=config.seed,
        bucket_cap_mb=config.bucket_cap_mb,
        micro_batches=config.micro_batches,
        lr=config.lr,
    )


def for_ranks(config: DDPConfig, spec: TrainSpec, ranks: int) -> TrainSpec:
    """A run to the target on ``ranks`` ranks: the rate follows the rule from one rank's
    batch (weak) or from the global batch (strong, where the global batch does not change)."""
    if not config.target_acc:
        return spec
    base = config.per_rank_batch if config.scaling == "weak" else config.batch_size
    try:
        return target_spec(
            replace(spec, lr=config.lr), ranks, config.target_acc, config.max_epochs,
            rule=config.lr_rule, base_batch=base, warmup_epochs=config.warmup_epochs,
        )  # fmt: skip
    except ValueError as err:
        raise ConfigError(str(err)) from None


def run_ddp(config: DDPConfig, progress: Progress) -> Result:
    where = place(config.ranks, config.device)  # the baseline rank gets the same device, threads
    device, threads = where.device, where.threads
    progress.update(0, 1, where.note)
    spec = train_spec(config)
    plan = [config.ranks]
    if config.baseline and config.ranks > 1:
        plan.insert(0, 1)
    records = []
    for i, ranks in enumerate(plan):
        part = Progress(
            lambda d, t, n, i=i, r=ranks: progress.update(
                i + (d / t if t else 0), len(plan), f"{plural(r, 'rank')}: {n}"
            ),
            cancel=progress.cancel_event,
        )
        mine = spec
        if ranks == 1 and config.scaling == "strong":
            mine = replace(spec, per_rank_batch=config.batch_size)
        mine = for_ranks(config, mine, ranks)
        outs, started = launch_spec(ranks, mine, device, threads, part)
        records.append(_record(config, ranks, outs, started) | to_target(config, ranks, outs))
    base = next((r for r in records if r["ranks"] == 1), None)
    for r in records:
        r["efficiency"] = (
            r["samples_per_s"] / (r["ranks"] * base["samples_per_s"]) if base else None
        )
    if records[-1]["ranks"] > 1:
        records.append(model_record(config, records[-1], base))
    if one_gpu_beside(config, gpu_count()):
        progress.update(len(plan), len(plan), "one rank on the GPU, beside the CPU ranks")
        records.append(one_gpu_record(config, spec))
    progress.update(len(plan), len(plan), "done")
    return make_result("ddp", config, records)


def model_record(config: DDPConfig, last: dict[str, Any], base: dict | None) -> dict[str, Any]:
    """The model tier beside the run of ``last`` ranks: one rank's step, shared out (strong:
    each rank's part of the batch) or repeated (weak), plus the gradients' all-reduce with no
    overlap. Built on the measured one-rank step ``base`` (not on each rank's compute, timed
    apart and noisy), so its efficiency, 1 / (1 + allreduce / step), stays below 1 as a model
    without overlap must."""
    one = base or last
    share = last["per_rank_batch"] / one["per_rank_batch"]
    compute = one["step_s"] * share if base else last["compute_s"]
    predicted = compute + last["allreduce_s"]
    rate = last["global_batch"] / predicted
    steps = last.get("steps_to_target")
    return {
        "tier": "model",
        "ranks": last["ranks"],
        "model": config.model,
        "scaling": config.scaling,
        "global_batch": last["global_batch"],
        "step_s": predicted,
        "compute_s": compute,
        "comm_s": last["allreduce_s"],
        "samples_per_s": rate,
        "efficiency": rate / (last["ranks"] * base["samples_per_s"]) if base else None,
        "formula": "step = one rank's step x per-rank batch / its batch + allreduce_s "
        "(gradient bytes), no overlap",
    } | ({"time_to_target_s": steps * predicted} if steps else {})


def one_gpu_record(config: DDPConfig, spec: TrainSpec) -> dict[str, Any]:
    """One rank on GPU 0 with the same per-rank batch (see :func:`one_gpu_beside`)."""
    one = replace(spec, per_rank_batch=config.batch_size) if config.scaling == "strong" else spec
    gpu = place(1, "cuda")
    outs, started = launch_spec(1, for_ranks(config, one, 1), "cuda", gpu.threads, Progress())
    return (
        _record(config, 1, outs, started)
        | to_target(config, 1, outs)
        | {"role": "gpu-rank", "efficiency": None, "note": one_gpu_note(config.ranks)}
    )


def to_target(config: DDPConfig, ranks: int, outs: list[dict]) -> dict[str, Any]:
    """What a run to a target adds to its record (nothing without a target)."""
    return target_fields(outs[0], ranks, config.target_acc) if config.target_acc else {}


def one_gpu_beside(config: DDPConfig, gpus: int) -> bool:
    """On an allocation with fewer GPUs than ranks but at least one, ``device="auto"`` runs the
    ranks on the CPU and then one rank on GPU 0 with the same per-rank batch: the GPU is shown,
    and :func:`hpclab.ddp.scaling.from_measurements` calibrates the model from it."""
    return config.device == "auto" and 0 < gpus < config.ranks


def one_gpu_note(ranks: int) -> str:
    return (
        f"{ranks} ranks cannot share one GPU: NCCL refuses two ranks on one device, and "
        "processes sharing a GPU take turns on it instead of adding to it, so the ranks ran "
        "on the CPU and the GPU ran one rank beside them"
    )
