"""The ``search`` experiment's config, and the one signature every backend has (chapter 08).

A backend (:data:`Backend`) takes the config, the searcher and the progress, runs the trials it
asks the searcher for, and returns one :class:`~hpclab.trial_record.TrialRecord` per trial
it handed out; a backend that cannot go on raises :class:`~hpclab.search.fates.SearchStopped`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from hpclab.config import Config, ConfigError, param
from hpclab.progress import Progress
from hpclab.search.strategies import EARLY_STOPPING, STRATEGIES, Searcher
from hpclab.trial_record import TrialRecord

BACKENDS = ("sequential", "array", "submitit", "celery")
WHERE = ("local", "slurm")


@dataclass(frozen=True)
class SearchConfig(Config):
    backend: str = param("sequential", choices=BACKENDS, help="where trials run")
    strategy: str = param(
        "random", choices=STRATEGIES,
        help="grid, random, model-based (tpe), or random with early stopping (asha, hyperband)",
    )  # fmt: skip
    trials: int = param(16, min=1, max=1000, quick=4, help="trials (the search budget)")
    workers: int = param(2, min=1, max=64, help="parallel workers (celery)")
    where: str = param(
        "local", choices=WHERE, help="celery workers on this node or in one Slurm job"
    )
    throttle: int = param(
        2,
        min=1,
        max=64,
        help="array tasks running at once, the K of --array=0-N%%K (array, submitit)",
    )
    per_task: int = param(1, min=1, max=1000, help="trials per array task (array, submitit)")
    epochs: int = param(
        4, min=1, max=100, quick=1, help="epochs per trial (asha, hyperband: the most a trial gets)"
    )
    seed: int = param(0, min=0, max=2**31 - 1, help="seed of the strategy and the trials")
    samples: int = param(
        0, min=0, max=100_000, quick=300, help="training samples per trial (0 = all 1348)"
    )
    eta: int = param(3, min=2, max=8, help="asha, hyperband: 1 in eta trials goes on at each rung")
    min_epochs: int = param(1, min=1, max=100, help="asha, hyperband: epochs of the first rung")

    def check(self) -> None:
        if self.per_task > self.trials:
            raise ConfigError(
                f"per_task={self.per_task} exceeds trials={self.trials}; allowed: 1..{self.trials}"
            )
        if self.strategy in EARLY_STOPPING and self.epochs < self.min_epochs * self.eta:
            raise ConfigError(
                f"epochs={self.epochs} leaves {self.strategy} one rung (the first is at "
                f"min_epochs={self.min_epochs}, the next at min_epochs*eta="
                f"{self.min_epochs * self.eta}); allowed: epochs >= {self.min_epochs * self.eta}"
            )
        if self.strategy in EARLY_STOPPING and self.backend == "submitit":
            raise ConfigError(
                f"strategy={self.strategy} runs on backend sequential, celery or array (rungs as "
                "array jobs); not submitit"
            )

    @property
    def slots(self) -> int:
        """Trials that can run at once: what utilisation is measured against."""
        return {"sequential": 1, "celery": self.workers}.get(self.backend, self.throttle)


class Backend(Protocol):
    """Where the trials run: sequential, a job array, submitit, Celery workers."""

    def __call__(
        self, cfg: SearchConfig, searcher: Searcher, progress: Progress
    ) -> list[TrialRecord]: ...
