"""Chapter 01's experiments, registered for the CLI, the widget panels and the tests.

``hpclab run gemm | bandwidth | roofline | ops | crossover | train-throughput``.
"""

from __future__ import annotations

from hpclab.compute.bandwidth import BandwidthConfig, plot_bandwidth, run_bandwidth
from hpclab.compute.crossover import CrossoverConfig, plot_crossover, run_crossover
from hpclab.compute.gemm_sweep import GemmConfig, plot_gemm, run_gemm
from hpclab.compute.ops import OpsConfig, plot_ops, run_ops
from hpclab.compute.roofline import RooflineConfig, plot_roofline, run_roofline
from hpclab.compute.throughput import ThroughputConfig, plot_throughput, run_throughput
from hpclab.experiments import Experiment

EXPERIMENTS = [
    Experiment(
        "gemm",
        "01",
        "GEMM GFLOP/s and fraction of peak over sizes x dtypes x devices x threads",
        GemmConfig,
        run_gemm,
        plot_gemm,
    ),
    Experiment(
        "bandwidth",
        "01",
        "STREAM copy/scale/add/triad memory bandwidth on CPU and GPU",
        BandwidthConfig,
        run_bandwidth,
        plot_bandwidth,
    ),
    Experiment(
        "roofline",
        "01",
        "roofline: measured bandwidth and peak, with GEMM, add, softmax and conv placed on it",
        RooflineConfig,
        run_roofline,
        plot_roofline,
    ),
    Experiment(
        "ops",
        "01",
        "random numbers, FFT, AlexNet conv2 and pooling, CPU vs GPU (cudnn.benchmark on/off)",
        OpsConfig,
        run_ops,
        plot_ops,
    ),
    Experiment(
        "crossover",
        "01",
        "launch overhead: the size where a GPU overtakes the CPU (matmul, add)",
        CrossoverConfig,
        run_crossover,
        plot_crossover,
    ),
    Experiment(
        "train-throughput",
        "01",
        "training samples/s vs batch size and CPU threads (Guan 2019's tables beside)",
        ThroughputConfig,
        run_throughput,
        plot_throughput,
    ),
]
