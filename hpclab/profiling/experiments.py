"""Chapter 03's experiment registry: ``profile``, ``profiler-overhead``, ``profile-fix``,
``hardware-watch``, ``compile`` (read by :func:`hpclab.experiments.registry`)."""

from __future__ import annotations

from hpclab.experiments import Experiment
from hpclab.profiling.compile_experiment import CompileConfig, plot_compile, run_compile
from hpclab.profiling.fix import FixConfig, plot_fix, run_fix
from hpclab.profiling.overhead import OverheadConfig, plot_overhead, run_overhead
from hpclab.profiling.profile_experiment import ProfileConfig, plot_profile, run_profile
from hpclab.profiling.watch import WatchConfig, plot_watch, run_watch

EXPERIMENTS = [
    Experiment(
        "profile",
        "03",
        "profile the slow training run (cprofile, line, memory, tracemalloc, torch) with faults",
        ProfileConfig,
        run_profile,
        plot_profile,
    ),
    Experiment(
        "profiler-overhead",
        "03",
        "the same Python-heavy run bare and under each profiler: slowdown per tool",
        OverheadConfig,
        run_overhead,
        plot_overhead,
    ),
    Experiment(
        "profile-fix",
        "03",
        "fix the slow run one fault at a time: gain of each fix, and DataLoader workers",
        FixConfig,
        run_fix,
        plot_fix,
    ),
    Experiment(
        "hardware-watch",
        "03",
        "CPU/RSS (and GPU via nvidia-smi) sampled during a run, a verified matmul burn-in",
        WatchConfig,
        run_watch,
        plot_watch,
    ),
    Experiment(
        "compile",
        "03",
        "torch.compile vs eager on the course's MLP: compile time, step time, speed-up, graph breaks",
        CompileConfig,
        run_compile,
        plot_compile,
    ),
]
