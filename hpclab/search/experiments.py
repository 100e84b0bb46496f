"""Chapter 08's experiment registry (read by :func:`hpclab.experiments.registry`)."""

from __future__ import annotations

from hpclab.experiments import Experiment
from hpclab.search.asha_compare import AshaConfig, plot_asha, run_asha
from hpclab.search.autotune import AutotuneConfig, run_autotune
from hpclab.search.autotune_plot import plot_autotune
from hpclab.search.compare import StrategiesConfig, plot_strategies, run_strategies
from hpclab.search.search_experiment import SearchConfig, plot_search, run_search
from hpclab.search.serve import ServeConfig, run_serve
from hpclab.search.serve_plot import plot_serve

EXPERIMENTS = [
    Experiment(
        name="search",
        chapter="08",
        help="hyper-parameter search: grid/random/tpe or early-stopping asha/hyperband trials, sequential, as a job array, via submitit or on Celery workers",
        config=SearchConfig,
        run=run_search,
        plot=plot_search,
    ),
    Experiment(
        name="search-strategies",
        chapter="08",
        help="grid vs random vs model-based search at equal budget, over several seeds",
        config=StrategiesConfig,
        run=run_strategies,
        plot=plot_strategies,
    ),
    Experiment(
        name="search-asha",
        chapter="08",
        help="random search with and without early stopping (ASHA, Hyperband): best loss, "
        "epochs and wall time over several seeds",
        config=AshaConfig,
        run=run_asha,
        plot=plot_asha,
    ),
    Experiment(
        name="serve",
        chapter="08",
        help="a trained model behind Celery workers: latency, throughput and request batching",
        config=ServeConfig,
        run=run_serve,
        plot=plot_serve,
    ),
    Experiment(
        name="autotune",
        chapter="08",
        help="prune threads x ranks x batch x loader workers x buckets x dtype x format, "
        "screen the rest in parallel, re-measure the best alone",
        config=AutotuneConfig,
        run=run_autotune,
        plot=plot_autotune,
    ),
]
