"""Chapter 04's experiment registry: ``pack``, ``storage-read``, ``loader``, ``data-wait``,
``staging``, ``loader-knobs`` (read by :func:`hpclab.experiments.registry`)."""

from __future__ import annotations

from hpclab.experiments import Experiment
from hpclab.storage.loader_knobs import KnobsConfig, plot_knobs, run_knobs
from hpclab.storage.loading import LoaderConfig, WaitConfig, run_loader, run_wait
from hpclab.storage.pack_experiment import PackConfig, run_pack
from hpclab.storage.plots import plot_loader, plot_pack, plot_read, plot_staging, plot_wait
from hpclab.storage.read_experiment import ReadConfig, run_read
from hpclab.storage.staging import StagingConfig, run_staging

EXPERIMENTS = [
    Experiment(
        "pack",
        "04",
        "write a dataset as lmdb/hdf5/files/shards/memmap (atomic, verified)",
        PackConfig,
        run_pack,
        plot_pack,
    ),
    Experiment(
        "storage-read",
        "04",
        "random vs sequential, warm vs cold reads per format",
        ReadConfig,
        run_read,
        plot_read,
    ),
    Experiment(
        "loader",
        "04",
        "DataLoader: format x batch size x workers, beside Fox et al. 2015's Caffe table",
        LoaderConfig,
        run_loader,
        plot_loader,
    ),
    Experiment(
        "data-wait",
        "04",
        "training steps split into waiting for data vs computing",
        WaitConfig,
        run_wait,
        plot_wait,
    ),
    Experiment(
        "staging",
        "04",
        "stage small files vs a tar vs an LMDB to node-local disk",
        StagingConfig,
        run_staging,
        plot_staging,
    ),
    Experiment(
        "loader-knobs",
        "04",
        "DataLoader persistent_workers (start-up per epoch), prefetch_factor (slow source), "
        "pin_memory",
        KnobsConfig,
        run_knobs,
        plot_knobs,
    ),
]
