"""Early stopping for a search: ASHA and Hyperband (chapter 08).

Most configurations of a search are bad, and their first epochs already say so. Successive
halving trains every configuration for a few epochs (the first *rung*), keeps the best 1/eta,
trains those eta times longer, and so on up to the full budget; ASHA (Li et al., "A System for
Massively Parallel Hyperparameter Tuning", MLSys 2020) promotes asynchronously, so no worker
waits for a rung to fill; Hyperband (Li et al., "Hyperband: A Novel Bandit-Based Approach to
Hyperparameter Optimization", JMLR 2018) runs several halvings (brackets) that start at
different rungs, hedging against a first rung too short to tell configurations apart.

What Optuna covers, and the course uses as it is: the pruners
(:class:`optuna.pruners.SuccessiveHalvingPruner` is ASHA, :class:`optuna.pruners.
HyperbandPruner`), a trial that reports its validation loss after each epoch and asks whether
to stop (``trial.report``/``trial.should_prune``), and the shared storage the pruner reads:
in memory for the sequential backend, the search's own Redis for Celery workers
(:class:`optuna.storages.journal.JournalRedisBackend`), so a running trial on any worker is
stopped between two epochs.

What Optuna does not cover (it cannot suspend and resume a trial: its docs say so) and is
written here: **synchronous rungs** for job arrays, where a task's start-up dwarfs an epoch.
Each rung is one array of the trials still alive; each task resumes its trial from the
checkpoint the previous rung wrote (:func:`hpclab.trial.run_trial`'s ``checkpoint``) and trains
up to the rung; when the whole rung is in, the best 1/eta of each bracket go on
(:func:`promote`) and the rest are recorded as stopped at that epoch (:func:`ladder`,
:func:`rungs`). Brackets follow Optuna's Hyperband: bracket b's first rung is at
``min_epochs * eta**b``.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from typing import Any

DIVERGED = 1e6  # what a diverged trial (loss inf) reports: very bad, a number the pruner sorts


def rungs(min_epochs: int, max_epochs: int, eta: int, bracket: int = 0) -> list[int]:
    """The epochs at which bracket ``bracket`` decides, ending with ``max_epochs``:
    ``min_epochs * eta**(bracket + k)`` below ``max_epochs``, then ``max_epochs``."""
    out, k = [], 0
    while (e := min_epochs * eta ** (bracket + k)) < max_epochs:
        out.append(e)
        k += 1
    return [*out, max_epochs]


def brackets(strategy: str, min_epochs: int, max_epochs: int, eta: int) -> int:
    """How many brackets: one for ASHA; for Hyperband one per rung of the first bracket
    (Optuna's ``floor(log_eta(max / min)) + 1``)."""
    if strategy == "asha":
        return 1
    return len(rungs(min_epochs, max_epochs, eta))


def ladder(strategy: str, min_epochs: int, max_epochs: int, eta: int) -> list[int]:
    """Every epoch at which some bracket decides: one synchronous round each."""
    n = brackets(strategy, min_epochs, max_epochs, eta)
    return sorted({e for b in range(n) for e in rungs(min_epochs, max_epochs, eta, b)})


def promote(losses: dict[int, float], eta: int) -> set[int]:
    """The trials of one rung that go on: the best ``max(1, n // eta)`` (lowest loss; a
    diverged trial, ``inf``, last; ties by trial index)."""
    keep = max(1, len(losses) // eta)
    ranked = sorted(losses, key=lambda i: (_finite(losses[i]), i))
    return set(ranked[:keep])


def _finite(loss: float) -> float:
    return loss if math.isfinite(loss) else DIVERGED


def make_pruner(strategy: str, min_epochs: int, max_epochs: int, eta: int) -> Any:
    """Optuna's pruner for ``strategy``: ASHA or Hyperband, rungs counted in epochs."""
    import optuna

    if strategy == "asha":
        return optuna.pruners.SuccessiveHalvingPruner(min_resource=min_epochs, reduction_factor=eta)
    if strategy == "hyperband":
        return optuna.pruners.HyperbandPruner(
            min_resource=min_epochs, max_resource=max_epochs, reduction_factor=eta
        )
    raise ValueError(f"strategy={strategy!r}; allowed: asha, hyperband")


def new_study(cfg: Any, redis_url: str | None = None) -> tuple[Any, dict[str, Any]]:
    """A study for the search's pruner, and the spec a worker needs to find it: in memory, or
    in the Redis at ``redis_url`` (the Celery workers' broker) when given."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    spec = {
        "strategy": cfg.strategy, "min_epochs": cfg.min_epochs, "max_epochs": cfg.epochs,
        "eta": cfg.eta, "study": f"hpclab-search-{uuid.uuid4().hex[:12]}", "redis": redis_url,
    }  # fmt: skip
    study = optuna.create_study(
        study_name=spec["study"], storage=_storage(redis_url), direction="minimize",
        pruner=make_pruner(cfg.strategy, cfg.min_epochs, cfg.epochs, cfg.eta),
    )  # fmt: skip
    return study, spec


def _storage(redis_url: str | None) -> Any:
    if redis_url is None:
        return None
    import warnings

    from optuna.exceptions import ExperimentalWarning
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalRedisBackend

    url = redis_url.replace("redis+socket://", "unix://", 1)  # kombu's spelling, redis-py's
    with warnings.catch_warnings():  # Optuna marks its Redis journal experimental (since 3.1)
        warnings.simplefilter("ignore", ExperimentalWarning)
        return JournalStorage(JournalRedisBackend(url))


def load_study(spec: dict[str, Any]) -> Any:
    """The study of ``spec`` from its Redis, with the same pruner (a Celery worker's side)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner = make_pruner(spec["strategy"], spec["min_epochs"], spec["max_epochs"], spec["eta"])
    return optuna.load_study(study_name=spec["study"], storage=_storage(spec["redis"]),
                             pruner=pruner)  # fmt: skip


def pruned_trial(
    study: Any, run: Callable[[Callable[[int, float], bool]], dict[str, Any]]
) -> dict[str, Any]:
    """One trial under the study's pruner: ``run(report)`` trains, calling ``report(epoch,
    val_loss) -> stop`` after each epoch (:func:`hpclab.trial.run_trial`'s hook); the study is
    told how it ended (finished with its loss, or pruned)."""
    from optuna.trial import TrialState

    trial = study.ask()

    def report(epoch: int, val_loss: float) -> bool:
        trial.report(_finite(val_loss), epoch + 1)  # step = epochs trained, as the rungs count
        return trial.should_prune()

    try:
        out = run(report)
    except BaseException:
        study.tell(trial, state=TrialState.FAIL)
        raise
    if out.get("pruned"):
        study.tell(trial, state=TrialState.PRUNED)
    else:
        study.tell(trial, _finite(out["val_loss"]))
    return out
