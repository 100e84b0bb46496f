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
to the trial's start, less start-up: the scheduler or the broker) and ``startup_s`` (a fresh
process's interpreter, imports and data before its first trial; 0 on a warm worker).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from hpclab.config import Config, ConfigError, param
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.search.strategies import STRATEGIES, Searcher

BACKENDS = ("sequential", "array", "submitit", "celery")
WHERE = ("local", "slurm")


@dataclass(frozen=True)
class SearchConfig(Config):
    backend: str = param("sequential", choices=BACKENDS, help="where trials run")
    strategy: str = param("random", choices=STRATEGIES, help="grid, random or model-based (tpe)")
    trials: int = param(16, min=1, max=1000, quick=6, help="trials (the search budget)")
    workers: int = param(2, min=1, max=64, help="parallel workers (celery)")
    where: str = param(
        "local", choices=WHERE, help="celery workers on this node or in one Slurm job"
    )
    throttle: int = param(
        2, min=1, max=64, help="array tasks running at once, %K (array, submitit)"
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
    }


def _sequential(cfg: SearchConfig, searcher: Searcher, progress: Progress) -> list[dict]:
    from hpclab.trial import run_trial

    records, t0 = [], time.perf_counter()
    while batch := searcher.ask(1):
        index, params = batch[0]
        progress.update(len(records), cfg.trials, f"trial {index + 1}/{cfg.trials}")
        t_submit = time.perf_counter()
        out = run_trial(params, epochs=cfg.epochs, seed=cfg.seed, samples=cfg.samples)
        searcher.tell(index, out["val_loss"])
        records.append(_record(index, params, out, t_submit, time.perf_counter(), t0))
    return records


def _celery(cfg: SearchConfig, searcher: Searcher, progress: Progress) -> list[dict]:
    """Keep ``workers`` Celery workers busy. A worker that dies mid-trial: its trial is sent again
    to the others (``retries`` counts it), or reported failed when no worker is left; a trial
    that raises is recorded with its error. No trial is lost silently."""
    from hpclab.search.allocation import celery_allocation
    from hpclab.search.broker import celery_pool
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
                        records.append(_failed(index, params, err, t_submit, t0))
            finished = [i for i, (res, _, _) in running.items() if res.ready()]
            if not finished:
                if len(lost) == len(pool.procs):
                    for index, (_, params, t_submit) in list(running.items()):
                        records.append(_failed(index, params, "no worker is left", t_submit, t0))
                    running.clear()
                time.sleep(0.02)
                continue
            for index in finished:
                res, params, t_submit = running.pop(index)
                try:
                    out = res.get(timeout=10)
                except Exception as exc:  # noqa: BLE001 - a trial's own error, kept in its record
                    records.append(
                        _failed(index, params, f"{type(exc).__name__}: {exc}", t_submit, t0)
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


def _allocation_lost(cfg: SearchConfig, pool: Any, records: list[dict]) -> None:
    from hpclab.search.allocation import AllocationLost

    failed = sum(1 for r in records if r.get("error"))
    raise AllocationLost(
        f"the workers' job {pool.job.job_id} ended {pool.state} mid-search: "
        f"{len(records) - failed} trials done, {failed} failed, {cfg.trials - len(records)} "
        "not run (the job was cancelled or hit its limit; its log: "
        f"{pool.job.log_path()})"
    )


def _failed(index: int, params: dict, error: str, t_submit: float, t0: float) -> dict:
    now = time.perf_counter()
    return {
        "trial": index, "params": params, "val_loss": math.inf, "val_acc": 0.0, "epochs": 0,
        "seconds": 0.0, "overhead_s": now - t_submit, "start_s": t_submit - t0,
        "end_s": now - t0, "worker": None, "error": error, "queue_s": 0.0, "startup_s": 0.0,
    }  # fmt: skip


def run_search(cfg: SearchConfig, progress: Progress) -> Result:
    from hpclab.search.job_backends import run_array, run_submitit

    searcher = Searcher(cfg.strategy, cfg.trials, cfg.seed)
    backend = {"sequential": _sequential, "celery": _celery, "array": run_array}
    backend["submitit"] = run_submitit
    t0 = time.perf_counter()
    records = backend[cfg.backend](cfg, searcher, progress)
    wall = time.perf_counter() - t0
    best = math.inf
    busy = sum(r["seconds"] for r in records)
    for r in records:
        r.setdefault("retries", 0)
        r.setdefault("error", "")
    for r in records:  # in trial order: the best loss found after this many trials
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
    progress.update(cfg.trials, cfg.trials, "")
    return make_result("search", cfg, records)


def backends_table(results: list[Result]) -> Any:
    """One row per search: backend, trials, wall time, median trial and overhead, utilisation."""
    import statistics

    import pandas as pd

    rows = []
    for res in results:
        recs = res.records
        rows.append(
            {
                "backend": recs[0]["backend"],
                "workers": res.config.get("workers", 1)
                if recs[0]["backend"] != "sequential"
                else 1,
                "trials": len(recs),
                "wall (s)": round(recs[0]["wall_s"], 2),
                "median trial (s)": round(statistics.median(r["seconds"] for r in recs), 3),
                "median overhead (ms)": round(
                    statistics.median(r["overhead_s"] for r in recs) * 1e3, 1
                ),
                "utilisation": f"{recs[0]['utilisation']:.0%}",
                "best loss": round(min(r["val_loss"] for r in recs), 3),
            }
        )
    return pd.DataFrame(rows).set_index("backend")


def plot_search(result: Result) -> Any:
    """Left: best validation loss vs trials spent. Right: when each trial ran, per worker."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    recs = result.records
    fig = make_subplots(
        rows=1, cols=2, horizontal_spacing=0.12,
        subplot_titles=("best validation loss so far", "trials per worker (grey: waiting, blue: computing)"),
    )  # fmt: skip
    fig.add_trace(
        go.Scatter(
            x=[r["trial"] + 1 for r in recs], y=[r["best_so_far"] for r in recs],
            mode="lines+markers", name=f"{recs[0]['strategy']} on {recs[0]['backend']}" if recs else "",
        ),
        row=1, col=1,
    )  # fmt: skip
    workers = sorted({r["worker"] for r in recs if r["worker"] is not None})
    for r in recs:
        if r["worker"] is None:
            continue
        lane = f"worker {workers.index(r['worker']) + 1}"
        # Grey: waiting for a worker and dispatch (overhead); blue: the trial computing.
        computing_from = r["end_s"] - r["seconds"]
        for base, width, colour, what in (
            (r["start_s"], computing_from - r["start_s"], "#c7c7c7", "queue + dispatch"),
            (computing_from, r["seconds"], "#1f77b4", "computing"),
        ):
            fig.add_trace(
                go.Bar(
                    x=[max(width, 0.0)], y=[lane], base=[base], orientation="h",
                    showlegend=False, marker_color=colour, marker_line_width=0.5,
                    hovertext=f"trial {r['trial'] + 1}, {what}: loss {r['val_loss']:.3f}",
                ),
                row=1, col=2,
            )  # fmt: skip
    fig.update_xaxes(title_text="trials", row=1, col=1)
    fig.update_yaxes(title_text="validation loss", type="log", row=1, col=1)
    fig.update_xaxes(title_text="seconds since the search started", row=1, col=2)
    fig.update_layout(height=380, barmode="overlay", legend={"orientation": "h", "y": -0.25})
    return fig
