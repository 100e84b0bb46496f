"""Chapter 09 part 2's experiment registry (read by :func:`hpclab.experiments.registry`)."""

from __future__ import annotations

from hpclab.experiments import Experiment
from hpclab.sharding.checkpoint import CheckpointConfig, plot_checkpoint, run_checkpoint
from hpclab.sharding.fsdp_experiment import FsdpConfig, plot_fsdp, run_fsdp
from hpclab.sharding.planner import PlanConfig, plot_plan, run_plan

EXPERIMENTS = [
    Experiment(
        "fsdp",
        "09",
        "DDP vs ZeRO-1/2/3 (FSDP2) on N ranks: equal weights, bytes held, peak, sent, step time",
        FsdpConfig,
        run_fsdp,
        plot_fsdp,
    ),
    Experiment(
        "zero-plan",
        "09",
        "memory per device by ZeRO stage against H100/A100/V100/this machine; largest that fits",
        PlanConfig,
        run_plan,
        plot_plan,
    ),
    Experiment(
        "sharded-checkpoint",
        "09",
        "torch.distributed.checkpoint: save on N ranks, load on M, bit-equal; vs one file",
        CheckpointConfig,
        run_checkpoint,
        plot_checkpoint,
    ),
]
