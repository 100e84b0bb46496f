"""The ``celery`` backend of experiment ``search``: trials as Celery tasks (chapter 08).

``workers`` Celery workers on this node (:func:`hpclab.search.broker.celery_pool`) or inside ONE
Slurm job (:func:`hpclab.search.allocation.celery_allocation`), fed by a private Redis. The
searcher keeps every worker busy: as soon as one trial returns, the next is asked for and sent,
so the model-based sampler learns from every result that is in.
"""

from __future__ import annotations

import time
from typing import Any

from hpclab.progress import Progress
from hpclab.search.job_backends import failed_record as _failed
from hpclab.search.strategies import Searcher


def run_celery(cfg: Any, searcher: Searcher, progress: Progress) -> list[dict]:
    """Keep ``workers`` Celery workers busy. A worker that dies mid-trial: its trial is sent again
    to the others (``retries`` counts it), or reported failed when no worker is left; a trial
    that raises is recorded with its error. No trial is lost silently."""
    from hpclab.search.allocation import celery_allocation
    from hpclab.search.broker import celery_pool
    from hpclab.search.search_experiment import _record
    from hpclab.search.tasks import app_for

    records: list[dict] = []
    retries: dict[int, int] = {}
    pool_of = celery_allocation if cfg.where == "slurm" else celery_pool
    with pool_of(cfg.workers) as (url, pool):
        app = app_for(url)
        t0 = time.perf_counter()
        running: dict[int, tuple[Any, dict, float]] = {}
        lost: set[int] = set()

        def send(index: int, params: dict) -> None:
            res = app.send_task("hpclab.trial", args=[params, cfg.epochs, cfg.seed, cfg.samples])
            running[index] = (res, params, time.perf_counter())

        def submit(n: int) -> None:
            for index, params in searcher.ask(n):
                send(index, params)

        submit(cfg.workers)
        while running:
            progress.update(len(records), cfg.trials, f"{len(running)} trials running")
            for w, proc in enumerate(pool.procs):
                if w in lost or proc.poll() is None:
                    continue
                lost.add(w)
                live = [f"w{i}@" for i in range(len(pool.procs)) if i not in lost]
                for index, (res, params, t_submit) in list(running.items()):
                    if res.ready():
                        continue
                    info = res.info if res.state == "STARTED" else None
                    host = str(info.get("hostname", "")) if isinstance(info, dict) else ""
                    if any(host.startswith(h) for h in live):
                        continue  # running on a worker that is alive
                    # Started on the dead worker, or taken by it before it said so (still
                    # PENDING): revoke it (a live worker drops it if it is still queued) and
                    # send it again.
                    app.control.revoke(res.id)
                    res.forget()
                    retries[index] = retries.get(index, 0) + 1
                    if live:
                        send(index, params)
                    else:
                        running.pop(index)
                        err = (
                            f"worker w{w} died (exit code {proc.returncode}) and no worker is left"
                        )
                        records.append(_failed(index, params, err, t_submit, t0, time.perf_counter))
            finished = [i for i, (res, _, _) in running.items() if res.ready()]
            if not finished:
                if len(lost) == len(pool.procs):
                    for index, (_, params, t_submit) in list(running.items()):
                        records.append(
                            _failed(
                                index, params, "no worker is left", t_submit, t0, time.perf_counter
                            )
                        )
                    running.clear()
                time.sleep(0.02)
                continue
            for index in finished:
                res, params, t_submit = running.pop(index)
                try:
                    out = res.get(timeout=10)
                except Exception as exc:  # noqa: BLE001 - a trial's own error, kept in its record
                    records.append(
                        _failed(
                            index,
                            params,
                            f"{type(exc).__name__}: {exc}",
                            t_submit,
                            t0,
                            time.perf_counter,
                        )
                    )
                    continue
                searcher.tell(index, out["val_loss"])
                records.append(_record(index, params, out, t_submit, time.perf_counter(), t0))
            submit(len(finished))
        if cfg.where == "slurm" and pool.ended():
            _allocation_lost(cfg, pool, records)
    for r in records:
        r["retries"] = retries.get(r["trial"], 0)
    return sorted(records, key=lambda r: r["trial"])


def _allocation_lost(cfg: Any, pool: Any, records: list[dict]) -> None:
    from hpclab.search.allocation import AllocationLost

    failed = sum(1 for r in records if r.get("error"))
    raise AllocationLost(
        f"the workers' job {pool.job.job_id} ended {pool.state} mid-search: "
        f"{len(records) - failed} trials done, {failed} failed, {cfg.trials - len(records)} "
        "not run (the job was cancelled or hit its limit; its log: "
        f"{pool.job.log_path()})"
    )
