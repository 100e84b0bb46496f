"""The experiment registry: one name -> config class + ``run`` + ``plot`` (chapter 00).

A chapter adds its registry module to ``TOPICS``: ``hpclab/<topic>/experiments.py`` (or the
topic's one module, for chapter 00's ``hpclab.welcome``), which defines ``EXPERIMENTS``, a list of
:class:`Experiment`. The CLI (``hpclab run NAME``), the widget panels, the tests and the
benchmarks all go through :func:`run`, so there is one code path per experiment.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hpclab.config import Config, ConfigError
from hpclab.progress import Progress
from hpclab.results import Result, measured_here

# One entry per chapter topic module, in chapter order.
TOPICS: tuple[str, ...] = (
    "hpclab.welcome",
    "hpclab.compute.experiments",
    "hpclab.topology.experiments",
    "hpclab.profiling.experiments",
    "hpclab.storage.experiments",
    "hpclab.sgd.experiments",
    "hpclab.ddp.experiments",
    "hpclab.parallel.experiments",
    "hpclab.cluster.experiments",
    "hpclab.search.experiments",
    "hpclab.memory.experiments",
)


@dataclass(frozen=True)
class Experiment:
    name: str
    chapter: str  # e.g. "00"
    help: str  # one line for `hpclab run --list`
    config: type[Config]
    run: Callable[[Any, Progress], Result]  # run(config, progress) -> Result
    plot: Callable[[Result], Any] | None = None  # plot(result) -> plotly Figure


def _scan() -> tuple[dict[str, Experiment], dict[str, str]]:
    """Experiments by name, and the topic modules that could not be imported (with why).

    A topic whose import fails (a package missing from a cluster's environment, say ``lmdb``)
    takes only its own experiments away; the others still list and run.
    """
    out: dict[str, Experiment] = {}
    broken: dict[str, str] = {}
    for module_name in TOPICS:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            broken[module_name] = f"{type(exc).__name__}: {exc}"
            continue
        for exp in getattr(module, "EXPERIMENTS", ()):
            if exp.name in out:
                raise RuntimeError(f"experiment {exp.name!r} is registered twice")
            out[exp.name] = exp
    return out, broken


def registry() -> dict[str, Experiment]:
    """All experiments that can run here, by name (imports the topic modules on first use)."""
    return _scan()[0]


def unavailable() -> dict[str, str]:
    """Topic modules that failed to import, with a one-line reason each (empty when all load)."""
    return _scan()[1]


def get(name: str) -> Experiment:
    experiments, broken = _scan()
    if name not in experiments:
        why = "".join(f"; {module} did not load ({reason})" for module, reason in broken.items())
        raise ConfigError(
            f"unknown experiment {name!r}; known: {', '.join(sorted(experiments))}{why}"
        )
    return experiments[name]


def run(name: str, progress: Progress | None = None, **params: Any) -> Result:
    """Validate ``params`` into the experiment's config and run it."""
    exp = get(name)
    config = exp.config.create(**params)
    return run_config(exp, config, progress)


def run_config(exp: Experiment, config: Config, progress: Progress | None = None) -> Result:
    """Run ``exp`` with a validated config (notebook, CLI and widget panels all come here).

    The CPU share the run obtained goes into ``result.env["cpu_share"]``: a number measured while
    other processes held our cores says so beside it (plots, panel status). A run whose work ran
    in Slurm jobs (``make_result(..., ran_elsewhere=True)``) gets none, and so does one that only
    evaluates a model (no live record: nothing measured here can be low).
    """
    from hpclab.measure.cpu_share import measure_cpu_share

    # Our live children (Celery workers, ranks) work for this run: they count as ours.
    with measure_cpu_share(descendants=True) as got:
        result = exp.run(config, progress or Progress())
    env = getattr(result, "env", None)
    if (
        got.value is not None
        and env is not None
        and not env.get("ran_elsewhere")
        and measured_here(result)
    ):
        result.env["cpu_share"] = got.value.to_dict()
    return result
