"""Experiment ``search``: N trials of one strategy on one backend, timed (chapter 08).

Backends run the same :func:`hpclab.trial.run_trial`:

- ``sequential``: one after another in this process: the baseline every parallel backend must beat;
- ``celery``: a private Redis and ``workers`` Celery workers (:mod:`hpclab.search.broker`), on
  this node (``where="local"``) or inside ONE Slurm job (``where="slurm"``,
  :mod:`hpclab.search.allocation`); the searcher keeps every worker busy: as soon as one trial
  returns, the next is asked for and sent (the model-based sampler learns from every result);
- ``array`` and ``submitit``: every trial a Slurm array task, ``throttle`` at once, ``per_task``
  trials per task (:mod:`hpclab.search.job_backends`): all asked for up front.

Each record is one trial: ``trial``, its ``params``, ``val_loss``/``val_acc``, ``seconds`` (the
trial's own compute, measured where it ran), ``overhead_s`` (what the backend added: wall time
from submission to result minus ``seconds``: queueing, dispatch, serialisation), ``start_s`` and
``end_s`` from the search's start, ``worker`` (the process that ran it), ``queue_s`` (submission
until a process took the trial: the broker, or the scheduler and a throttle slot) and
``startup_s`` (a fresh process's interpreter, imports and data before its first trial; 0 on a
warm worker); the job backends add ``began_s`` and ``node`` (:mod:`hpclab.search.job_backends`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from hpclab.config import Config, ConfigError, param
from hpclab.progress import Cancelled, Progress
from hpclab.results import Result, make_result
from hpclab.search.fates import (
    SearchIncomplete,
    SearchStopped,
    account_for_all,
    failed_record,
    fate_of,
    summary,
)
from hpclab.search.search_plot import backends_table, plot_search  # noqa: F401 (the chapter's)
from hpclab.search.strategies import STRATEGIES, Searcher

BACKENDS = ("sequential", "array", "submitit", "celery")
WHERE = ("local", "slurm")


@dataclass(frozen=True)
class SearchConfig(Config):
    backend: str = param("sequential", choices=BACKENDS, help="where trials run")
    strategy: str = param("random", choices=STRATEGIES, help="grid, random or model-based (tpe)")
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
    epochs: int = param(4, min=1, max=100, quick=1, help="epochs per trial")
    seed: int = param(0, min=0, max=2**31 - 1, help="seed of the strategy and the trials")
    samples: int = param(
        0, min=0, max=100_000, quick=300, help="training samples per trial (0 = all 1348)"
    )

    def check(self) -> None:
        if self.per_task > self.trials:
            raise ConfigError(
                f"per_task={self.per_task} exceeds trials={self.trials}; allowed: 1..{self.trials}"
            )

    @property
    def slots(self) -> int:
        """Trials that can run at once: what utilisation is measured against."""
        return {"sequential": 1, "celery": self.workers}.get(self.backend, self.throttle)


def _record(index: int, params: dict, out: dict, t_submit: float, t_end: float, t0: float) -> dict:
    # started_at is the trial's wall clock: the submission's, on the same clock
    t_submit_wall = time.time() - (time.perf_counter() - t_submit)
    return {
        "trial": index,
        "params": params,
        "val_loss": out["val_loss"],
        "val_acc": out["val_acc"],
        "epochs": out["epochs"],
        "seconds": out["seconds"],
        "overhead_s": max(0.0, (t_end - t_submit) - out["seconds"]),
        "start_s": t_submit - t0,
        "end_s": t_end - t0,
        "worker": out["pid"],
        "queue_s": max(0.0, out["started_at"] - t_submit_wall),
        "startup_s": 0.0,
        **fate_of(out),
    }


def _sequential(cfg: SearchConfig, searcher: Searcher, progress: Progress) -> list[dict]:
    from hpclab.trial import run_trial

    records, t0 = [], time.perf_counter()
    while batch := searcher.ask(1):
        index, params = batch[0]
        try:
            progress.update(len(records), cfg.trials, f"trial {index + 1}/{cfg.trials}")
        except Cancelled:  # before this trial began: it never ran
            raise SearchStopped("interrupted", "interrupted", records) from None
        t_submit = time.perf_counter()
        try:
            out = run_trial(params, epochs=cfg.epochs, seed=cfg.seed, samples=cfg.samples)
        except (KeyboardInterrupt, Cancelled):
            why = "interrupted (Ctrl-C or Cancel) while it ran"
            records.append(failed_record(index, params, why, t_submit, t0, time.perf_counter,
                                         cause="interrupted"))  # fmt: skip
            raise SearchStopped("interrupted", "interrupted", records) from None
        searcher.tell(index, out["val_loss"])
        records.append(_record(index, params, out, t_submit, time.perf_counter(), t0))
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
    backend = {"sequential": _sequential, "celery": run_celery, "array": run_array}
    backend["submitit"] = run_submitit
    t0 = time.perf_counter()
    stopped = None
    try:
        records = backend[cfg.backend](cfg, searcher, progress)
    except SearchStopped as stop:
        records, stopped = stop.records, stop
    wall = time.perf_counter() - t0
    records = account_for_all(records, cfg.trials)
    best = math.inf
    busy = sum(r["seconds"] for r in records)
    for r in records:  # in trial order: the best loss found after this many trials
        r.setdefault("retries", 0)
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


def what_ran(result: Result) -> str:
    """One measured line: the trials, how long one computed and what a fresh process cost (the
    ratio the chapter's lesson is about)."""
    import statistics

    from hpclab.display import plural

    recs = [r for r in result.records if r.get("fate", "finished") in ("finished", "stopped")]
    if not recs:
        return ""
    cfg = result.config
    line = (
        f"{plural(len(recs), 'trial')} ({plural(cfg.get('epochs', 1), 'epoch')} on "
        f"{cfg.get('samples') or 'all'} samples) on {recs[0]['backend']}: each computed "
        f"{statistics.median(r['seconds'] for r in recs):.2f} s"
    )
    ups = [r["startup_s"] for r in recs if r.get("startup_s")]
    if ups:
        line += f", a fresh process took {statistics.median(ups):.2f} s to start"
    return line


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
