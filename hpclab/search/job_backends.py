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
the later trials of a task it also holds the earlier trials they waited behind). Records are
:class:`~hpclab.trial_record.TrialRecord`, on its one clock (the wall clock, comparable
across the nodes of a cluster whose clocks are synchronised).

With early stopping (asha, hyperband) the array backend runs synchronous rungs: one array per
rung, each trial resuming from its checkpoint (:mod:`hpclab.search.early_stopping`).
"""

from __future__ import annotations

import time
from pathlib import Path

from hpclab.progress import Progress
from hpclab.search.search_config import SearchConfig
from hpclab.search.strategies import EARLY_STOPPING, Searcher
from hpclab.trial_record import TrialRecord, clock


def _chunks(batch: list[tuple[int, dict]], per_task: int) -> list[list[tuple[int, dict]]]:
    return [batch[i : i + per_task] for i in range(0, len(batch), per_task)]


def _slurm():
    from hpclab.cluster import local
    from hpclab.cluster.runner import require_cluster

    cluster = require_cluster()
    return cluster, local.site_profile(cluster)


def run_array(cfg: SearchConfig, searcher: Searcher, progress: Progress) -> list[TrialRecord]:
    """All trials as one job array (chapter 07's :mod:`hpclab.cluster.arrays`); with early
    stopping, one array per synchronous rung (:func:`_rungs`)."""
    cluster, site = _slurm()
    batch = searcher.ask(cfg.trials)
    t0 = clock()
    if cfg.strategy in EARLY_STOPPING:
        return _rungs(cluster, site, cfg, searcher, batch, t0, progress)
    got = _array_round(cluster, site, cfg, searcher, batch, cfg.epochs, None, t0, progress)
    return [got[i] for i in sorted(got)]


def _array_round(
    cluster, site, cfg: SearchConfig, searcher: Searcher, batch: list[tuple[int, dict]],
    epochs: int, checkpoints: Path | None, t0: float, progress: Progress, what: str = "",
) -> dict[int, TrialRecord]:  # fmt: skip
    """``batch`` as one array, each trial trained up to ``epochs`` (resumed from its file in
    ``checkpoints`` when there is one); every trial of it gets a record."""
    from hpclab.cluster.arrays import read_results, submit_array, write_plan
    from hpclab.cluster.runner import new_workdir

    work = new_workdir("search-array")
    files = [str(checkpoints / f"trial-{i}.pt") for i, _ in batch] if checkpoints else None
    per_task = min(cfg.per_task, len(batch))
    write_plan(work, [p for _, p in batch], epochs, cfg.seed, cfg.samples, per_task, files)
    t_submit = clock()
    job = submit_array(cluster, site, work, len(batch), cfg.throttle, per_task)
    records: dict[int, TrialRecord] = {}

    def collect(results: dict[int, dict]) -> None:
        for k, out in results.items():
            index, params = batch[k]
            if index not in records:
                records[index] = TrialRecord.from_output(index, params, out, t_submit, clock(), t0)
                searcher.tell(index, out["val_loss"])

    try:
        while True:
            collect(read_results(work, len(batch)))
            progress.update(len(records), len(batch), f"array job {job.job_id}{what}")
            if len(records) == len(batch):
                break
            st = job.state()
            if st.done:  # ended, yet some trials wrote nothing: one more look, then failures
                time.sleep(1.0)
                collect(read_results(work, len(batch)))
                for index, params in batch:
                    if index not in records:
                        why = f"array job {job.job_id} ended {st.state} before trial {index} wrote its result"
                        records[index] = TrialRecord.failed(index, params, why, t_submit, t0,
                                                            "job ended")  # fmt: skip
                break
            progress.check()
            time.sleep(cluster.poll_s)
    except BaseException:
        job.cancel()
        raise
    return records


def _rungs(cluster, site, cfg, searcher, batch, t0, progress) -> list[TrialRecord]:
    """Synchronous successive halving (asha: one bracket) or Hyperband's brackets, one array
    per rung: every trial still alive trains up to the rung's epochs, resuming from its
    checkpoint; when all are in, each bracket deciding at this rung keeps its best 1/eta
    (:func:`hpclab.search.early_stopping.promote`), the others are stopped at this epoch."""
    from hpclab.cluster.runner import new_workdir
    from hpclab.search.early_stopping import brackets, ladder, promote, rungs

    shape = (cfg.min_epochs, cfg.epochs, cfg.eta)
    n = brackets(cfg.strategy, *shape)
    checkpoints = new_workdir("search-rungs")
    alive, done = dict(batch), {}
    for level in ladder(cfg.strategy, *shape):
        now = [(i, alive[i]) for i in sorted(alive)]
        what = f", rung at epoch {level}: {len(now)} trials"
        got = _array_round(cluster, site, cfg, searcher, now, level, checkpoints, t0, progress,
                           what)  # fmt: skip
        for i, rec in got.items():
            done[i] = rec if i not in done else _carried(done[i], rec)
            if rec.fate == "failed":
                alive.pop(i)
        for b in range(n):
            if level == cfg.epochs or level not in rungs(*shape, b):
                continue
            members = {i: done[i].val_loss for i in alive if i % n == b}
            for i in members.keys() - promote(members, cfg.eta):
                done[i].fate = "stopped"
                alive.pop(i)
    return [done[i] for i in sorted(done)]


def _carried(before: TrialRecord, now: TrialRecord) -> TrialRecord:
    """A trial's record after one more rung: its times add up over the arrays it ran in."""
    now.seconds += before.seconds
    now.startup_s += before.startup_s
    now.queue_s += before.queue_s
    now.start_s, now.began_s = before.start_s, before.began_s
    now.overhead_s = max(0.0, now.end_s - now.start_s - now.seconds)
    return now


def run_submitit(cfg: SearchConfig, searcher: Searcher, progress: Progress) -> list[TrialRecord]:
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
    t0 = t_submit = clock()
    jobs = map_array(cluster, site, spec, new_workdir("search-submitit"), fresh_trials,
                     [[p for _, p in c] for c in chunks], [cfg.epochs] * n, [cfg.seed] * n,
                     [cfg.samples] * n)  # fmt: skip
    records: list[TrialRecord] = []
    for k, outs, error in wait_results(cluster, jobs, progress=progress):
        for j, (index, params) in enumerate(chunks[k]):
            if error:
                cause = "job ended" if "without a result" in error else "exception"
                records.append(TrialRecord.failed(index, params, error, t_submit, t0, cause))
                continue
            records.append(TrialRecord.from_output(index, params, outs[j], t_submit, clock(), t0))
            searcher.tell(index, outs[j]["val_loss"])
        progress.update(len(records), len(batch), f"submitit array {jobs[0].job_id.split('_')[0]}")
    return sorted(records, key=lambda r: r.trial)
