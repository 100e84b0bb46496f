"""Chapter 06, "Multi-GPU data parallel": DDP runs, all-reduce, ring, buckets, scaling model.

Modules: :mod:`~hpclab.ddp.worker` (what each rank does), :mod:`~hpclab.ddp.train` (experiment
``ddp``), :mod:`~hpclab.ddp.allreduce` (``allreduce``: algbw/busbw + alpha-beta fit),
:mod:`~hpclab.ddp.ring` (``ring-allreduce``: send/recv ring vs ``dist.all_reduce``),
:mod:`~hpclab.ddp.buckets` (``ddp-buckets``: tensor fusion), :mod:`~hpclab.ddp.model` and
:mod:`~hpclab.ddp.scaling` (``scaling-model``), :mod:`~hpclab.ddp.plots`.
"""

from __future__ import annotations

from hpclab.ddp.allreduce import AllreduceConfig, run_allreduce
from hpclab.ddp.buckets import BucketConfig, plot_buckets, run_buckets
from hpclab.ddp.plots import plot_allreduce, plot_ddp
from hpclab.ddp.ring import RingConfig, run_ring
from hpclab.ddp.scaling import ScalingModelConfig, plot_scaling_model, run_scaling_model
from hpclab.ddp.train import DDPConfig, run_ddp
from hpclab.experiments import Experiment

EXPERIMENTS = [
    Experiment(
        "ddp",
        "06",
        "real DDP training on N ranks: samples/s, compute vs comm, efficiency",
        DDPConfig,
        run_ddp,
        plot_ddp,
    ),
    Experiment(
        "allreduce",
        "06",
        "all-reduce time, algbw, busbw for 4 B..64 MB + alpha-beta fit",
        AllreduceConfig,
        run_allreduce,
        plot_allreduce,
    ),
    Experiment(
        "ring-allreduce",
        "06",
        "naive send/recv ring all-reduce vs dist.all_reduce",
        RingConfig,
        run_ring,
        plot_allreduce,
    ),
    Experiment(
        "ddp-buckets",
        "06",
        "DDP bucket_cap_mb sweep (tensor fusion): steps/s",
        BucketConfig,
        run_buckets,
        plot_buckets,
    ),
    Experiment(
        "scaling-model",
        "06",
        "predicted step/efficiency to 512 GPUs vs seed 001's tables",
        ScalingModelConfig,
        run_scaling_model,
        plot_scaling_model,
    ),
]
