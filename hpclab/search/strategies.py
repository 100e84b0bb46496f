"""Where to look next: grid, random and a model-based search over the same space (chapter 08).

Nakayama (2017) lists parameter search as the first kind of parallel work in deep learning:
every combination of learning rate, momentum, width... is independent, so each can run in its
own process or on its own machine, by grid, at random, or guided by a model of the results so far
(Bayesian optimisation). Grid and random are a few lines; the model-based search is Optuna's
TPE sampler (Bergstra et al., "Algorithms for Hyper-Parameter Optimization", NeurIPS 2011), which
is maintained, small and does exactly this; writing our own would teach less. Optuna's
``ask``/``tell`` interface lets the trials run anywhere (a Slurm array, Celery) while the sampler
stays in the notebook.

The space (:data:`SPACE`): ``lr`` log-uniform, ``momentum`` uniform, ``batch_size`` and ``model``
categorical. A *batch* of suggestions is asked for at once so that a parallel backend has work for
every worker; the model-based sampler then learns between batches, not between trials.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

STRATEGIES = ("grid", "random", "tpe", "asha", "hyperband")
# Random configurations, most stopped early (:mod:`hpclab.search.early_stopping`): the same
# configurations as ``random`` at the same seed, so the two compare trial for trial.
EARLY_STOPPING = ("asha", "hyperband")


@dataclass(frozen=True)
class Dim:
    name: str
    kind: str  # "log", "float", "choice"
    low: float = 0.0
    high: float = 1.0
    choices: tuple = ()

    def grid(self, n: int) -> list[Any]:
        if self.kind == "choice":
            return list(self.choices)
        if n == 1:
            return [self.low if self.kind == "float" else math.sqrt(self.low * self.high)]
        if self.kind == "log":
            a, b = math.log10(self.low), math.log10(self.high)
            return [10 ** (a + (b - a) * i / (n - 1)) for i in range(n)]
        return [self.low + (self.high - self.low) * i / (n - 1) for i in range(n)]

    def sample(self, rng: random.Random) -> Any:
        if self.kind == "choice":
            return rng.choice(self.choices)
        if self.kind == "log":
            return 10 ** rng.uniform(math.log10(self.low), math.log10(self.high))
        return rng.uniform(self.low, self.high)


# The grid varies the last axis fastest: a small budget starts with the cheap model.
SPACE: tuple[Dim, ...] = (
    Dim("model", "choice", choices=("tiny", "large")),
    Dim("batch_size", "choice", choices=(64, 16, 256)),
    Dim("lr", "log", 1e-3, 1.0),
    Dim("momentum", "float", 0.0, 0.95),
)


def grid_points(budget: int, space: tuple[Dim, ...] = SPACE) -> list[dict[str, Any]]:
    """A full grid no larger than ``budget``: continuous axes get as many points as fit."""
    choices = math.prod(len(d.choices) for d in space if d.kind == "choice")
    continuous = [d for d in space if d.kind != "choice"]
    per_axis = 1
    while choices * (per_axis + 1) ** len(continuous) <= budget:
        per_axis += 1
    axes = [d.grid(per_axis) if d.kind != "choice" else list(d.choices) for d in space]
    points = [
        dict(zip([d.name for d in space], combo, strict=True)) for combo in itertools.product(*axes)
    ]
    return points[:budget]


class Searcher:
    """Ask for a batch of parameter sets, tell their losses; the same for every strategy."""

    def __init__(self, strategy: str, budget: int, seed: int = 0, space: tuple[Dim, ...] = SPACE):
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy={strategy!r}; allowed: {', '.join(STRATEGIES)}")
        self.strategy, self.budget, self.space = strategy, budget, space
        self.rng = random.Random(seed)
        self.asked = 0
        self._grid: Iterator[dict[str, Any]] = iter(grid_points(budget, space))
        self._study = None
        self._pending: dict[int, Any] = {}
        if strategy == "tpe":
            import optuna

            optuna.logging.set_verbosity(optuna.logging.WARNING)
            sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=max(4, budget // 5))
            self._study = optuna.create_study(direction="minimize", sampler=sampler)

    def ask(self, n: int) -> list[tuple[int, dict[str, Any]]]:
        """Up to ``n`` new parameter sets (fewer when the budget or the grid runs out)."""
        out = []
        for _ in range(min(n, self.budget - self.asked)):
            if self.strategy == "grid":
                params = next(self._grid, None)
                if params is None:
                    break
            elif self.strategy == "random" or self.strategy in EARLY_STOPPING:
                params = {d.name: d.sample(self.rng) for d in self.space}
            else:
                trial = self._study.ask()
                params = {d.name: self._suggest(trial, d) for d in self.space}
                self._pending[self.asked] = trial
            out.append((self.asked, params))
            self.asked += 1
        return out

    def tell(self, index: int, val_loss: float) -> None:
        if self._study is not None and index in self._pending:
            value = val_loss if math.isfinite(val_loss) else 1e6  # diverged: very bad, not NaN
            self._study.tell(self._pending.pop(index), value)

    @staticmethod
    def _suggest(trial: Any, d: Dim) -> Any:
        if d.kind == "choice":
            return trial.suggest_categorical(d.name, list(d.choices))
        return trial.suggest_float(d.name, d.low, d.high, log=d.kind == "log")
