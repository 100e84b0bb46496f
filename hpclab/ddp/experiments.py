"""Chapter 06's experiment registry (read by :func:`hpclab.experiments.registry`)."""

from __future__ import annotations

from hpclab.ddp.allreduce import AllreduceConfig, run_allreduce
from hpclab.ddp.buckets import BucketConfig, plot_buckets, run_buckets
from hpclab.ddp.ddp_experiment import DDPConfig, run_ddp
from hpclab.ddp.hang import HangConfig, plot_hang, run_hang
from hpclab.ddp.large_batch import LargeBatchConfig, run_large_batch
from hpclab.ddp.large_batch_plot import plot_large_batch
from hpclab.ddp.plots import plot_allreduce, plot_ddp
from hpclab.ddp.ring import RingConfig, run_ring
from hpclab.ddp.scaling import ScalingModelConfig, plot_scaling_model, run_scaling_model
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
        "large-batch",
        "06",
        "steps to a target accuracy vs global batch: LR rules, warm-up, noise scale",
        LargeBatchConfig,
        run_large_batch,
        plot_large_batch,
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
        "predicted step/efficiency to 512 GPUs vs Guan 2019's tables",
        ScalingModelConfig,
        run_scaling_model,
        plot_scaling_model,
    ),
    Experiment(
        "hang",
        "06",
        "a planted collective fault (skip | shape) on gloo ranks: which tool names the rank",
        HangConfig,
        run_hang,
        plot_hang,
    ),
]
