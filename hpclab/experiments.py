"""The experiment registry: one name -> config class + ``run`` + ``plot`` (chapter 00).

A chapter adds its topic module to ``TOPICS``; that module defines ``EXPERIMENTS``, a list of
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
from hpclab.results import Result

# One entry per chapter topic module, in chapter order.
TOPICS: tuple[str, ...] = (
    "hpclab.welcome",
    "hpclab.compute.experiments",
    "hpclab.storage.experiments",
    "hpclab.sgd",
    "hpclab.ddp",
)


@dataclass(frozen=True)
class Experiment:
    name: str
    chapter: str  # e.g. "00"
    help: str  # one line for `hpclab run --list`
    config: type[Config]
    run: Callable[[Any, Progress], Result]  # run(config, progress) -> Result
    plot: Callable[[Result], Any] | None = None  # plot(result) -> plotly Figure


def registry() -> dict[str, Experiment]:
    """All experiments by name (imports the topic modules on first use)."""
    out: dict[str, Experiment] = {}
    for module_name in TOPICS:
        module = importlib.import_module(module_name)
        for exp in getattr(module, "EXPERIMENTS", ()):
            if exp.name in out:
                raise RuntimeError(f"experiment {exp.name!r} is registered twice")
            out[exp.name] = exp
    return out


def get(name: str) -> Experiment:
    experiments = registry()
    if name not in experiments:
        raise ConfigError(f"unknown experiment {name!r}; known: {', '.join(sorted(experiments))}")
    return experiments[name]


def run(name: str, progress: Progress | None = None, **params: Any) -> Result:
    """Validate ``params`` into the experiment's config and run it."""
    exp = get(name)
    config = exp.config.create(**params)
    return exp.run(config, progress or Progress())
