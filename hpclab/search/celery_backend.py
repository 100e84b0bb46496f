"""The ``celery`` backend of experiment ``search``: trials as Celery tasks (chapter 08).

``workers`` Celery workers on this node (:func:`hpclab.search.broker.celery_pool`) or inside ONE
Slurm job (:func:`hpclab.search.allocation.celery_allocation`), fed by a private Redis. The
searcher keeps every worker busy: as soon as one trial returns, the next is asked for and sent,
so the model-based sampler learns from every result that is in. With early stopping (asha,
hyperband) each task reports its epochs to an Optuna study in the same Redis, whose pruner stops
a running trial between two epochs (:mod:`hpclab.search.early_stopping`).
"""

from __future__ import annotations

import time
from typing import Any

from hpclab.dist.failures import exit_words
from hpclab.progress import Cancelled, Progress
from hpclab.search.fates import SearchStopped
from hpclab.search.search_config import SearchConfig
from hpclab.search.strategies import EARLY_STOPPING, Searcher
from hpclab.trial_record import TrialRecord, clock


def run_celery(cfg: SearchConfig, searcher: Searcher, progress: Progress) -> list[TrialRecord]:
    """Keep ``workers`` Celery workers busy. A worker that dies mid-trial: its trial is sent again
    to the others (``retries`` counts it), or reported failed when no worker is left; a trial
    that raises is recorded with its error. No trial is lost silently: when the last worker or
    the broker is gone, or on Ctrl-C, :class:`~hpclab.search.fates.SearchStopped` carries every
    trial handed out (finished ones with their results, running ones failed with the cause)."""
    from hpclab.search.allocation import celery_allocation
    from hpclab.search.broker import celery_pool

    records: list[TrialRecord] = []
    retries: dict[int, int] = {}
    pool_of = celery_allocation if cfg.where == "slurm" else celery_pool
    try:
        with pool_of(cfg.workers) as (url, pool):
            _feed(cfg, searcher, progress, url, pool, records, retries)
    finally:
        for r in records:
            r.retries = retries.get(r.trial, 0)
    return sorted(records, key=lambda r: r.trial)


def _feed(cfg, searcher, progress, url, pool, records, retries) -> None:
    """The searcher's loop: send, watch the workers, collect; raises SearchStopped."""
    from redis.exceptions import RedisError

    from hpclab.search.celery_app import app_for

    app = app_for(url)
    early_stop = _pruner_study(cfg, url)
    t0 = clock()
    running: dict[int, tuple[Any, dict, float]] = {}
    lost: dict[int, str] = {}

    def fail_running(cause: str, why: str) -> None:
        for index, (res, params, t_submit) in list(running.items()):
            records.append(TrialRecord.failed(index, params, why, t_submit, t0, cause))
            res.backend = None  # dropped without unsubscribing: Redis may be gone
        running.clear()

    def send(index: int, params: dict) -> None:
        args = [params, cfg.epochs, cfg.seed, cfg.samples, early_stop]
        res = app.send_task("hpclab.trial", args=args)
        running[index] = (res, params, clock())

    def submit(n: int) -> None:
        for index, params in searcher.ask(n):
            send(index, params)

    try:
        submit(cfg.workers)
        while running:
            progress.update(len(records), cfg.trials, f"{len(running)} trials running")
            _reap_lost_workers(app, pool, running, lost, retries, send)
            if len(lost) == len(pool.procs):
                cause, why = _all_lost(cfg, pool, lost)
                fail_running(cause, why)
                raise SearchStopped(cause, why, records)
            finished = [i for i, (res, _, _) in running.items() if res.ready()]
            if not finished:
                time.sleep(0.02)
                continue
            for index in finished:
                res, params, t_submit = running.pop(index)
                try:
                    records.append(_collect(index, res, params, t_submit, t0, searcher))
                except RedisError:
                    running[index] = (res, params, t_submit)
                    raise
            submit(len(finished))
    except (RedisError, OSError) as exc:
        why = f"the broker (Redis) is gone: {str(exc).splitlines()[0]}"
        fail_running("broker lost", why)
        raise SearchStopped("broker lost", why, records) from None
    except (KeyboardInterrupt, Cancelled):
        fail_running("interrupted", "interrupted (Ctrl-C or Cancel) while it ran")
        raise SearchStopped("interrupted", "interrupted", records) from None


def _pruner_study(cfg: SearchConfig, url: str) -> Any:
    """With early stopping (asha, hyperband): the pruner's Optuna study in the workers' Redis,
    which each task reports its epochs to; None otherwise."""
    if cfg.strategy not in EARLY_STOPPING:
        return None
    from hpclab.search.early_stopping import new_study

    return new_study(cfg, redis_url=url)[1]


def _collect(
    index: int, res: Any, params: dict, t_submit: float, t0: float, searcher: Searcher
) -> TrialRecord:
    """The record of a finished trial: its result, told to the searcher, or the error it raised.
    A broker (Redis) error while reading it is raised: the trial is not collected."""
    from redis.exceptions import RedisError

    try:
        out = res.get(timeout=10)
    except RedisError:
        raise
    except Exception as exc:  # noqa: BLE001 - a trial's own error, kept in its record
        why = f"{type(exc).__name__}: {exc}".splitlines()[0]
        return TrialRecord.failed(index, params, why, t_submit, t0)
    searcher.tell(index, out["val_loss"])
    record = TrialRecord.from_output(index, params, out, t_submit, clock(), t0)
    # collected: the result now lives here, not in Redis (which stays small); a broker gone at
    # this moment is noticed by the next poll
    try:
        res.forget()
    except (RedisError, OSError):
        pass
    return record


def _reap_lost_workers(app, pool, running, lost, retries, send) -> None:
    """Trials of a worker that died go to the live ones (``retries`` counts them); with no live
    worker left they stay in ``running`` for the caller to fail."""
    for w, proc in enumerate(pool.procs):
        if w in lost or proc.poll() is None:
            continue
        code = proc.returncode
        watch = getattr(pool, "oom", None)  # a local pool: the OOM killer can be named
        killer = watch.verdict() if watch is not None and code == -9 else ""
        lost[w] = exit_words(code, killer).removeprefix("was ")
        live = [f"w{i}@" for i in range(len(pool.procs)) if i not in lost]
        if not live:
            return
        for index, (res, params, _) in list(running.items()):
            if res.ready():
                continue
            info = res.info if res.state == "STARTED" else None
            host = str(info.get("hostname", "")) if isinstance(info, dict) else ""
            if any(host.startswith(h) for h in live):
                continue  # running on a worker that is alive
            # Started on the dead worker, or taken by it before it said so (still PENDING):
            # revoke it (a live worker drops it if it is still queued) and send it again.
            app.control.revoke(res.id)
            res.forget()
            retries[index] = retries.get(index, 0) + 1
            send(index, params)


def _all_lost(cfg: SearchConfig, pool: Any, lost: dict[int, str]) -> tuple[str, str]:
    if cfg.where == "slurm":
        return "job ended", (
            f"the workers' job {pool.job.job_id} ended {pool.state} mid-search (cancelled, or "
            f"it hit its time limit; its log: {pool.job.log_path()})"
        )
    cause = (
        "out of memory" if any("out-of-memory" in why for why in lost.values()) else "worker lost"
    )
    return cause, f"all {len(lost)} workers died: {'; '.join(sorted(set(lost.values())))}"
