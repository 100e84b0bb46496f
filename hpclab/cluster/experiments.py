"""Chapter 07's experiment registry (read by :func:`hpclab.experiments.registry`)."""

from __future__ import annotations

from hpclab.cluster.arrays import ArrayConfig, run_array
from hpclab.cluster.hello import HelloConfig, run_hello
from hpclab.cluster.multinode import MultinodeConfig, run_multinode
from hpclab.cluster.plots import plot_array, plot_hello, plot_multinode, plot_requeue
from hpclab.cluster.requeue import RequeueConfig, run_requeue
from hpclab.cluster.staging_job import StagingJobConfig, run_staging_job
from hpclab.experiments import Experiment
from hpclab.storage.plots import plot_staging

EXPERIMENTS = [
    Experiment(
        "slurm-hello",
        "07",
        "a first Slurm job on N nodes: cores it sees, states, sacct",
        HelloConfig,
        run_hello,
        plot_hello,
    ),
    Experiment(
        "ddp-multinode",
        "07",
        "chapter 06's DDP on N nodes via srun + torchrun: samples/s, weights vs one process",
        MultinodeConfig,
        run_multinode,
        plot_multinode,
    ),
    Experiment(
        "requeue",
        "07",
        "checkpoint on USR2 and requeue under a time limit: same weights, MB/s, requeue gap",
        RequeueConfig,
        run_requeue,
        plot_requeue,
    ),
    Experiment(
        "job-array",
        "07",
        "parameter search as a Slurm job array vs one trial after another",
        ArrayConfig,
        run_array,
        plot_array,
    ),
    Experiment(
        "staging-job",
        "07",
        "chapter 04's staging to node-local disk ($SLURM_TMPDIR) as a job step",
        StagingJobConfig,
        run_staging_job,
        plot_staging,
    ),
]
