"""The search's trials as Slurm jobs: one job array, or submitit's array (chapter 08).

Both submit all N trials at once through chapter 07's :mod:`hpclab.cluster` (one job API): the
searcher is asked for all N parameter sets up front, so a model-based strategy (TPE) cannot learn
between trials here: it samples N points from its prior, like a random search. What a job per
trial buys is a clean process, a time limit and accounting for every trial; what it costs is the
queue wait and a fresh process that imports torch and loads the data before each task (start-up).

- ``array``: one ``sbatch --array=0-(T-1)%K`` of ``python -m hpclab.cluster.arrays`` (T =
  ceil(N / per_task) tasks, K = ``throttle``), the same job array as chapter 07's; each task
  writes one JSON file per trial.
- ``submitit``: ``executor.map_array`` of :func:`hpclab.trial.fresh_trials`, with submitit's
  parameters translated from the same :class:`~hpclab.cluster.spec.JobSpec`
  (:mod:`hpclab.cluster.submitit_exec`, which also says why it never asks ``sacct``).

Each record has the fields of the other backends, with ``queue_s`` (submission to the start of
the trial's process: the scheduler and a throttle slot), ``startup_s`` (the process's start to its
first trial: interpreter, torch, the data, a first step; 0 for the later trials of a task),
``began_s`` (when its compute began, from the search's start) and ``node``; ``overhead_s`` is the
wall time from submission until the notebook has the result, less the trial's compute (so for
the later trials of a task it also holds the earlier trials they waited behind). Times are wall-clock (``time.time()``),
comparable across the nodes of a cluster whose clocks are synchronised.
"""

from __future__ import annotations

import time
from typing import Any

from hpclab.progress import Progress
from hpclab.search.fates import failed_record, fate_of
from hpclab.search.strategies import Searcher


def _chunks(batch: list[tuple[int, dict]], per_task: int) -> list[list[tuple[int, dict]]]:
    return [batch[i : i + per_task] for i in range(0, len(batch), per_task)]


def job_record(
    index: int, params: dict, out: dict, t_submit: float, t_seen: float, t0: float
) -> dict:
    """A trial record from a fresh process's result (:func:`hpclab.trial.timed_trials`)."""
    return {
        "trial": index, "params": params, "val_loss": out["val_loss"], "val_acc": out["val_acc"],
        "epochs": out["epochs"], "seconds": out["seconds"],
        "overhead_s": max(0.0, (t_seen - t_submit) - out["seconds"]),
        "queue_s": max(0.0, out["process_start"] - t_submit), "startup_s": out["startup_s"],
        "start_s": t_submit - t0, "began_s": out["started_at"] - t0, "end_s": t_seen - t0,
        "worker": f"{out['node'] or 'here'}:{out['pid']}", "node": out["node"], **fate_of(out),
    }  # fmt: skip


def _slurm():
    from hpclab.cluster import local
    from hpclab.cluster.runner import require_cluster

    cluster = require_cluster()
    return cluster, local.site_profile(cluster)


def run_array(cfg: Any, searcher: Searcher, progress: Progress) -> list[dict]:
    """All trials as one job array (chapter 07's :mod:`hpclab.cluster.arrays`)."""
    from hpclab.cluster.arrays import read_results, submit_array, write_plan
    from hpclab.cluster.runner import new_workdir

    cluster, site = _slurm()
    batch = searcher.ask(cfg.trials)
    work = new_workdir("search-array")
    write_plan(work, [p for _, p in batch], cfg.epochs, cfg.seed, cfg.samples, cfg.per_task)
    t0 = t_submit = time.time()
    job = submit_array(cluster, site, work, len(batch), cfg.throttle, cfg.per_task)
    records: dict[int, dict] = {}
    try:
        while True:
            for i, out in read_results(work, len(batch)).items():
                if i not in records:
                    records[i] = job_record(i, batch[i][1], out, t_submit, time.time(), t0)
                    searcher.tell(i, out["val_loss"])
            progress.update(len(records), len(batch), f"array job {job.job_id}")
            if len(records) == len(batch):
                break
            st = job.state()
            if st.done:  # ended, yet some trials wrote nothing: one more look, then failures
                time.sleep(1.0)
                late = read_results(work, len(batch))
                for i, (_, params) in enumerate(batch):
                    if i in late and i not in records:
                        records[i] = job_record(i, params, late[i], t_submit, time.time(), t0)
                    elif i not in records:
                        why = f"array job {job.job_id} ended {st.state} before trial {i} wrote its result"
                        records[i] = failed_record(i, params, why, t_submit, t0, cause="job ended")
                break
            progress.check()
            time.sleep(cluster.poll_s)
    except BaseException:
        job.cancel()
        raise
    return [records[i] for i in sorted(records)]


def run_submitit(cfg: Any, searcher: Searcher, progress: Progress) -> list[dict]:
    """All trials as submitit's array: one pickled call of :func:`hpclab.trial.fresh_trials`
    per ``per_task`` trials, at most ``throttle`` at once."""
    from hpclab.cluster.arrays import array_option
    from hpclab.cluster.runner import new_workdir
    from hpclab.cluster.spec import JobSpec
    from hpclab.cluster.submitit_exec import map_array, wait_results
    from hpclab.trial import fresh_trials

    cluster, site = _slurm()
    batch = searcher.ask(cfg.trials)
    chunks = _chunks(batch, cfg.per_task)
    spec = JobSpec(name="search-submitit", array=array_option(len(batch), cfg.throttle,
                   cfg.per_task), time="00:10:00", mem="512M")  # fmt: skip
    n = len(chunks)
    t0 = t_submit = time.time()
    jobs = map_array(cluster, site, spec, new_workdir("search-submitit"), fresh_trials,
                     [[p for _, p in c] for c in chunks], [cfg.epochs] * n, [cfg.seed] * n,
                     [cfg.samples] * n)  # fmt: skip
    records: list[dict] = []
    for k, outs, error in wait_results(cluster, jobs, progress=progress):
        for j, (index, params) in enumerate(chunks[k]):
            if error:
                cause = "job ended" if "without a result" in error else "exception"
                records.append(failed_record(index, params, error, t_submit, t0, cause=cause))
                continue
            records.append(job_record(index, params, outs[j], t_submit, time.time(), t0))
            searcher.tell(index, outs[j]["val_loss"])
        progress.update(len(records), len(batch), f"submitit array {jobs[0].job_id.split('_')[0]}")
    return sorted(records, key=lambda r: r["trial"])
