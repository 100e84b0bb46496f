"""Chapter 05's experiment registry (read by :func:`hpclab.experiments.registry`)."""

from __future__ import annotations

from hpclab.experiments import Experiment
from hpclab.sgd.hogwild_experiment import HogwildConfig, plot_hogwild, run_hogwild
from hpclab.sgd.ps_experiment import ParamServerConfig, plot_paramserver, run_paramserver

EXPERIMENTS = [
    Experiment(
        name="hogwild",
        chapter="05",
        help="lock-free (Hogwild!) or locked shared-memory SGD by N processes vs serial SGD",
        config=HogwildConfig,
        run=run_hogwild,
        plot=plot_hogwild,
    ),
    Experiment(
        name="paramserver",
        chapter="05",
        help="parameter server (sync/async/ssp) or all-reduce: updates/s, staleness, server load",
        config=ParamServerConfig,
        run=run_paramserver,
        plot=plot_paramserver,
    ),
]
