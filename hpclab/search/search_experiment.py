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
from hpclab.display import figure
from hpclab.progress import Progress
from hpclab.results import Result, make_result
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


def run_search(cfg: SearchConfig, progress: Progress) -> Result:
    from hpclab.search.job_backends import run_array, run_submitit

    searcher = Searcher(cfg.strategy, cfg.trials, cfg.seed)
    from hpclab.search.celery_backend import run_celery

    backend = {"sequential": _sequential, "celery": run_celery, "array": run_array}
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
    in_jobs = cfg.backend in ("array", "submitit") or (
        cfg.backend == "celery" and cfg.where == "slurm"
    )
    return make_result("search", cfg, records, ran_elsewhere=in_jobs)


def _label(res: Result) -> str:
    r = res.records[0]
    where = " in one job" if r.get("where") == "slurm" else ""
    return f"{r['backend']}{where}"


def backends_table(results: list[Result]) -> Any:
    """One row per search: wall time, median trial, the median overhead per trial split into
    queue wait (scheduler or broker) and start-up (a fresh process's imports and data), the
    trials that could run at once, utilisation (the fraction of their time spent computing) and
    the best loss. The chapter's three-way comparison: sequential vs job array vs submitit vs
    Celery workers (here or inside one allocation) on the same trials."""
    import statistics

    import pandas as pd

    rows = []
    for res in results:
        recs = res.records

        def med(key: str, recs: list[dict] = recs) -> float:
            return statistics.median(r.get(key, 0.0) for r in recs)

        rows.append({
            "backend": _label(res),
            "at once": SearchConfig.create(**res.config).slots if res.config else 1,
            "trials": len(recs),
            "failed": sum(1 for r in recs if r.get("error")),
            "wall (s)": round(recs[0]["wall_s"], 2),
            "median trial (s)": round(med("seconds"), 3),
            "median overhead (s)": round(med("overhead_s"), 3),
            "of which queue (s)": round(med("queue_s"), 3),
            "of which start-up (s)": round(med("startup_s"), 3),
            "utilisation": f"{recs[0]['utilisation']:.0%}",
            "best loss": round(min(r["val_loss"] for r in recs), 3),
        })  # fmt: skip
    return pd.DataFrame(rows).set_index("backend")


def _lanes(recs: list[dict]) -> dict[int, str]:
    """A lane per worker; for jobs (a fresh process per task) a lane per slot: each process
    takes the first lane free when it starts, so the lanes show how many ran at once."""
    recs = [r for r in recs if r["worker"] is not None]
    if not any("began_s" in r for r in recs):
        workers = sorted({r["worker"] for r in recs}, key=str)
        return {r["trial"]: f"worker {workers.index(r['worker']) + 1}" for r in recs}
    free_at: list[float] = []
    lane_of: dict[str, int] = {}
    out = {}
    for r in sorted(recs, key=lambda r: r["began_s"]):
        if r["worker"] not in lane_of:
            begin = r["began_s"] - r["startup_s"]  # the process started
            free = [i for i, t in enumerate(free_at) if t <= begin + 1e-3]
            lane_of[r["worker"]] = free[0] if free else len(free_at)
            if not free:
                free_at.append(0.0)
        lane = lane_of[r["worker"]]
        free_at[lane] = max(free_at[lane], r["began_s"] + r["seconds"])
        out[r["trial"]] = f"slot {lane + 1}"
    return out


@figure
def plot_search(result: Result) -> Any:
    """Left: best validation loss vs trials spent. Right: when each trial ran, per worker."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    recs = result.records
    fig = make_subplots(
        rows=1, cols=2, horizontal_spacing=0.12,
        subplot_titles=("best validation loss so far",
                        "trials per worker (grey: waiting, orange: start-up, blue: computing)"),
    )  # fmt: skip
    fig.add_trace(
        go.Scatter(
            x=[r["trial"] + 1 for r in recs], y=[r["best_so_far"] for r in recs],
            mode="lines+markers", name=f"{recs[0]['strategy']} on {recs[0]['backend']}" if recs else "",
        ),
        row=1, col=1,
    )  # fmt: skip
    lanes = _lanes(recs)
    bars = []
    for r in recs:
        if r["worker"] is None:
            continue
        # Grey: waiting (queue, throttle or broker); orange: a fresh process starting (imports,
        # data, a first step); blue: the trial computing; light grey: until the notebook had
        # the result. A later trial of a task runs in its warm process: no queue, no start-up.
        if "began_s" in r:
            began = r["began_s"]
            segments = [(began, r["seconds"], "#1f77b4", "computing"),
                        (began + r["seconds"], r["end_s"] - began - r["seconds"], "#e5e5e5",
                         "result back")]  # fmt: skip
            if r["startup_s"]:
                segments += [(r["start_s"], r["queue_s"], "#c7c7c7", "queue"),
                             (began - r["startup_s"], r["startup_s"], "#ff7f0e", "start-up")]  # fmt: skip
        else:
            computing_from = r["end_s"] - r["seconds"]
            segments = [(r["start_s"], computing_from - r["start_s"], "#c7c7c7", "queue + dispatch"),
                        (computing_from, r["seconds"], "#1f77b4", "computing")]  # fmt: skip
        bars += [(r, *seg) for seg in segments if seg[1] > 0]
    # Waiting first, so that a task queued behind a running one does not hide its compute.
    for r, base, width, colour, what in sorted(bars, key=lambda b: b[3] != "#c7c7c7"):
        fig.add_trace(
            go.Bar(
                x=[width], y=[lanes[r["trial"]]], base=[base], orientation="h",
                showlegend=False, marker_color=colour, marker_line_width=0.5,
                hovertext=f"trial {r['trial'] + 1}, {what} {width:.2f} s: loss {r['val_loss']:.3f}",
            ),
            row=1, col=2,
        )  # fmt: skip
    fig.update_xaxes(title_text="trials", row=1, col=1)
    fig.update_yaxes(title_text="validation loss", type="log", row=1, col=1)
    fig.update_xaxes(title_text="seconds since the search started", row=1, col=2)
    fig.update_layout(
        title=what_ran(result),
        height=400,
        barmode="overlay",
        legend={"orientation": "h", "y": -0.25},
    )
    return fig


def what_ran(result: Result) -> str:
    """One measured line: the trials, how long one computed and what a fresh process cost (the
    ratio the chapter's lesson is about)."""
    import statistics

    from hpclab.display import plural

    recs = [r for r in result.records if r.get("seconds") is not None]
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
