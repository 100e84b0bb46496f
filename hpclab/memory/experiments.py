"""Chapter 09 part 1's experiment registry (read by :func:`hpclab.experiments.registry`)."""

from __future__ import annotations

from hpclab.experiments import Experiment
from hpclab.memory.accumulation import AccumulationConfig, run_accumulation
from hpclab.memory.anatomy import AnatomyConfig, plot_anatomy, run_anatomy
from hpclab.memory.checkpointing import (
    CheckpointingConfig,
    plot_checkpointing,
    run_checkpointing,
)
from hpclab.memory.precision import PrecisionConfig, plot_precision, run_precision

EXPERIMENTS = [
    Experiment(
        "memory-anatomy",
        "09",
        "one step's bytes by part (params, grads, optimizer, activations, peak): measured vs model",
        AnatomyConfig,
        run_anatomy,
        plot_anatomy,
    ),
    Experiment(
        "precision",
        "09",
        "fp32 vs bf16 vs fp16 + loss scaling: loss curves, peak bytes, step time, zeroed grads",
        PrecisionConfig,
        run_precision,
        plot_precision,
    ),
    Experiment(
        "checkpointing",
        "09",
        "activation checkpointing per policy: activation bytes and step time, vs the model",
        CheckpointingConfig,
        run_checkpointing,
        plot_checkpointing,
    ),
    Experiment(
        "accumulation",
        "09",
        "k micro-batches vs one batch: equal weights, all-reduces per step (counted), activations",
        AccumulationConfig,
        run_accumulation,
    ),
]
