"""The training engine every chapter uses (core layer, beside :mod:`hpclab.dist`).

- :mod:`~hpclab.train.step`: data, the model registry and the one training step;
- :mod:`~hpclab.train.spec`: :class:`TrainSpec`, its validation and the sizing rule;
- :mod:`~hpclab.train.worker`: what each rank of a data-parallel run does (:func:`ddp_worker`);
- :mod:`~hpclab.train.engine`: :func:`run_spec`, the one way to train a spec on N ranks;
- :mod:`~hpclab.train.data`: the data sets a spec names and the validation split;
- :mod:`~hpclab.train.target`: training to a target validation accuracy (:func:`target_worker`);
- :mod:`~hpclab.train.optim`, :mod:`~hpclab.train.layerwise`, :mod:`~hpclab.train.noise`:
  optimizers (LARS, LAMB), schedules, learning-rate rules, the gradient noise scale.

It imports only :mod:`hpclab.dist`, :mod:`hpclab.measure`, :mod:`hpclab.progress` and torch:
the chapters' packages import it, never the other way round.
"""

from hpclab.train.cost import Checkpointed, block_bounds, flops_per_sample
from hpclab.train.data import DATASETS
from hpclab.train.engine import DEADLINE_S, Launch, local, preload, run_spec
from hpclab.train.spec import DTYPES, MIN_SAMPLES, TrainSpec, samples_for
from hpclab.train.step import (
    MLP_MODELS,
    MODELS,
    accuracy,
    autocast,
    digits,
    flat_grad,
    flat_params,
    forward_backward,
    grad_scaler,
    make_model,
    parameter_count,
    set_flat_params,
    synthetic_images,
    train_step,
)
from hpclab.train.target import target_worker, train_to_target
from hpclab.train.worker import batches, bucket_count, dataset, ddp_worker, wrap

__all__ = [
    "Checkpointed",
    "DATASETS",
    "DEADLINE_S",
    "DTYPES",
    "MIN_SAMPLES",
    "MLP_MODELS",
    "MODELS",
    "Launch",
    "TrainSpec",
    "accuracy",
    "autocast",
    "batches",
    "block_bounds",
    "bucket_count",
    "dataset",
    "ddp_worker",
    "digits",
    "flat_grad",
    "flat_params",
    "flops_per_sample",
    "forward_backward",
    "grad_scaler",
    "local",
    "make_model",
    "parameter_count",
    "preload",
    "run_spec",
    "samples_for",
    "set_flat_params",
    "synthetic_images",
    "target_worker",
    "train_step",
    "train_to_target",
    "wrap",
]
