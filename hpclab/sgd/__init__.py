"""Chapter 05, "Hogwild! and parameter-server SGD".

- :mod:`hpclab.sgd.problems`: the dense (MLP on digits) and sparse (logistic regression on
  sparse features, convex) problems, serial SGD, the optimum.
- :mod:`hpclab.sgd.hogwild`: lock-free shared-memory SGD by several processes, and the locked
  variant; :mod:`hpclab.sgd.hogwild_experiment`: the ``hogwild`` experiment.
- :mod:`hpclab.sgd.staleness`: versions, staleness and the stale-synchronous rule, pure.
- :mod:`hpclab.sgd.paramserver`: servers and trainers on ``torch.distributed`` send/recv, in
  sync, async and SSP modes, and synchronous all-reduce.
- :mod:`hpclab.sgd.ps_experiment`: the ``paramserver`` experiment and its plots.
"""

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
