"""Experiment ``search``: N trials of one strategy on one backend, timed (chapter 08).

Backends run the same :func:`hpclab.trial.run_trial`:

- ``sequential``: one after another in this process: the baseline every parallel backend must beat;
- ``celery``: a private Redis and ``workers`` Celery workers (:mod:`hpclab.search.broker`), on
  this node (``where="local"``) or inside ONE Slurm job (``where="slurm"``,
  :mod:`hpclab.search.allocation`); the searcher keeps every worker busy: as soon as one trial
  returns, the next is asked for and sent (the model-based sampler learns from every result);
- ``array`` and ``submitit``: every trial a Slurm array task, ``throttle`` at once, ``per_task``
  trials per task (:mod:`hpclab.search.job_backends`): all asked for up front.

Each record is one trial (:class:`hpclab.trial_record.TrialRecord`, its fields below, on one
clock): ``trial``, its ``params``, ``val_loss``/``val_acc``, ``seconds`` (the
trial's own compute, measured where it ran), ``overhead_s`` (what the backend added: wall time
from submission to result minus ``seconds``: queueing, dispatch, serialisation), ``start_s`` and
``end_s`` from the search's start, ``worker`` (the process that ran it), ``queue_s`` (submission
until a process took the trial: the broker, or the scheduler and a throttle slot) and
``startup_s`` (a fresh process's interpreter, imports and data before its first trial; 0 on a
warm worker), ``began_s`` (when its compute began), ``node``, ``curve`` (validation loss per
epoch) and its ``fate``. With ``strategy="asha"`` or ``"hyperband"`` most trials are stopped at a
rung (:mod:`hpclab.search.early_stopping`).
"""

from __future__ import annotations

import math
from typing import Any

from hpclab.progress import Cancelled, Progress
from hpclab.results import Result, make_result
from hpclab.search.fates import SearchIncomplete, SearchStopped, summary
from hpclab.search.search_config import BACKENDS, WHERE, Backend, SearchConfig
from hpclab.search.search_plot import backends_table, plot_search, what_ran  # noqa: F401 (the chapter's)
from hpclab.search.strategies import EARLY_STOPPING, Searcher
from hpclab.trial_record import TrialRecord, account_for_all, clock

__all__ = ["BACKENDS", "WHERE", "SearchConfig", "run_search", "three_ways", "what_ran"]


def run_sequential(cfg: SearchConfig, searcher: Searcher, progress: Progress) -> list[TrialRecord]:
    """One trial after another in this process; with early stopping (asha, hyperband) each
    reports every epoch to Optuna's pruner, which stops it at a rung (:mod:`hpclab.search.
    early_stopping`)."""
    from hpclab.trial import run_trial

    study = None
    if cfg.strategy in EARLY_STOPPING:
        from hpclab.search.early_stopping import new_study, pruned_trial

        study, _ = new_study(cfg)
    records, t0 = [], clock()
    while batch := searcher.ask(1):
        index, params = batch[0]
        try:
            progress.update(len(records), cfg.trials, f"trial {index + 1}/{cfg.trials}")
        except Cancelled:  # before this trial began: it never ran
            raise SearchStopped("interrupted", "interrupted", records) from None
        t_submit = clock()

        def train(report=None, params=params) -> dict:
            return run_trial(params, epochs=cfg.epochs, seed=cfg.seed, samples=cfg.samples,
                             report=report)  # fmt: skip

        try:
            out = pruned_trial(study, train) if study is not None else train()
        except (KeyboardInterrupt, Cancelled):
            why = "interrupted (Ctrl-C or Cancel) while it ran"
            records.append(TrialRecord.failed(index, params, why, t_submit, t0, "interrupted"))
            raise SearchStopped("interrupted", "interrupted", records) from None
        searcher.tell(index, out["val_loss"])
        records.append(TrialRecord.from_output(index, params, out, t_submit, clock(), t0))
    return records


def run_search(cfg: SearchConfig, progress: Progress) -> Result:
    """Run the search; every trial asked for ends with a ``fate`` (:mod:`hpclab.search.fates`).
    A search that stopped early raises :class:`~hpclab.search.fates.SearchIncomplete` with
    the result (finished trials kept) and one line saying why and how many finished."""
    from hpclab.measure.sysinfo import system_info
    from hpclab.search.celery_backend import run_celery
    from hpclab.search.job_backends import run_array, run_submitit

    system_info()  # the result's fingerprint (torch, the clock), now: a stop then takes no time
    searcher = Searcher(cfg.strategy, cfg.trials, cfg.seed)
    backends: dict[str, Backend] = {"sequential": run_sequential, "celery": run_celery,
                                    "array": run_array, "submitit": run_submitit}  # fmt: skip
    t0 = clock()
    stopped = None
    try:
        trials = backends[cfg.backend](cfg, searcher, progress)
    except SearchStopped as stop:
        trials, stopped = stop.records, stop
    wall = clock() - t0
    records = account_for_all(trials, cfg.trials)
    best = math.inf
    busy = sum(r["seconds"] for r in records)
    for r in records:  # in trial order: the best loss found after this many trials
        if r["fate"] in ("finished", "stopped"):
            best = min(best, r["val_loss"])
        r.update(
            best_so_far=best,
            backend=cfg.backend,
            strategy=cfg.strategy,
            wall_s=wall,
            # Of the time the workers were there, the fraction spent computing trials.
            where=cfg.where if cfg.backend == "celery" else "",
            utilisation=busy / (wall * cfg.slots),
            tier="live",
        )
    in_jobs = cfg.backend in ("array", "submitit") or (
        cfg.backend == "celery" and cfg.where == "slurm"
    )
    result = make_result("search", cfg, records, ran_elsewhere=in_jobs)
    if stopped is not None:
        raise SearchIncomplete(
            f"search stopped, {stopped}: {summary(records)} of {cfg.trials} trials",
            result,
            stopped.cause,
        )
    progress.update(cfg.trials, cfg.trials, "")
    return result


def three_ways(
    trials: int | None = None, throttle: int = 2, workers: int = 2, **common: Any
) -> list[Result]:
    """The chapter's comparison, "one search, four ways": the same trials (same strategy and
    seed) one after another, as a job array, as submitit's array (``throttle`` at once), and on
    ``workers`` Celery workers inside one Slurm job; show it with :func:`backends_table`.

    A backend that cannot run here is left out with one printed sentence (no Slurm: only the
    sequential loop; no Redis or Celery: no Celery row). ``trials=None``: the config's default
    (fewer in quick mode)."""
    from hpclab import experiments
    from hpclab.cluster import local
    from hpclab.search.broker import broker_problem

    runs = [dict(backend="sequential")]
    cluster = local.connect()
    if cluster is None:
        print(local.why_not())
    else:
        runs += [
            dict(backend="array", throttle=throttle),
            dict(backend="submitit", throttle=throttle),
        ]
        problem = broker_problem()
        if problem:
            print(problem)
        elif cluster.local:
            runs.append(dict(backend="celery", where="slurm", workers=workers))
        else:
            # A real cluster's nodes cannot reach this kernel's Redis socket: the workers start
            # here, inside the allocation this kernel already runs in.
            print("Celery workers start beside this kernel, inside its own allocation.")
            runs.append(dict(backend="celery", where="local", workers=workers))
    if trials is not None:
        common["trials"] = trials
    return [experiments.run("search", **common, **kw) for kw in runs]
