"""Experiment ``job-array``: a parameter search as a Slurm job array (chapter 07, section 4).

Nakayama (2017): a parameter search hands parameter combinations to processes or machines (grid
or random search). On Slurm that is one job array, ``--array=0-(T-1)%K``: T tasks, each with its
``SLURM_ARRAY_TASK_ID``, at most K running at once (K = the GPUs or nodes you may use, so the
array does not flood the queue). Each task runs ``per_task`` trials of
:func:`hpclab.trial.run_trial` (the same trial as chapter 08's search) and writes one JSON file
per trial; the notebook collects them. Chapter 08's ``search --backend array`` submits through
the same functions (:func:`write_plan`, :func:`submit_array`, :func:`read_results`).

The same trials also run one after another in one job, for the wall-time comparison. The
model of both: :func:`modelled_wall_s`.

Run one task by hand: ``python -m hpclab.cluster.arrays WORK_DIR TASK_ID``.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpclab.cluster import local
from hpclab.cluster.profiles import SiteProfile
from hpclab.cluster.runner import LAUNCH_STAMP, new_workdir, python, require_cluster, submit
from hpclab.cluster.slurm import Cluster, Job
from hpclab.cluster.spec import JobSpec
from hpclab.config import Config, ConfigError, param
from hpclab.progress import Progress
from hpclab.results import Result, make_result
from hpclab.trial_record import TrialRecord, clock

LRS = (0.01, 0.03, 0.1, 0.3)
BATCHES = (16, 64)


@dataclass(frozen=True)
class ArrayConfig(Config):
    trials: int = param(8, min=1, max=len(LRS) * len(BATCHES), quick=2, help="trials (grid points)")
    throttle: int = param(2, min=1, max=64, help="tasks running at once (the throttle of --array)")
    epochs: int = param(2, min=1, max=100, quick=1, help="epochs per trial")
    samples: int = param(
        0, min=0, max=100_000, quick=300, help="training samples per trial (0 = all)"
    )
    serial: bool = param(True, help="also run the trials one after another, for the wall time")


def grid(trials: int) -> list[dict]:
    """The first ``trials`` points of the (lr, batch) grid, in task-id order."""
    points = [{"lr": lr, "batch_size": b} for b, lr in itertools.product(BATCHES, LRS)]
    return points[:trials]


def array_option(trials: int, throttle: int, per_task: int = 1) -> str:
    """``--array`` for ``trials`` trials, ``per_task`` per task, ``throttle`` tasks at once."""
    if throttle < 1 or per_task < 1:
        raise ConfigError(f"throttle={throttle}, per_task={per_task}; allowed: both >= 1")
    if per_task > trials:
        raise ConfigError(f"per_task={per_task} exceeds trials={trials}; allowed: 1..{trials}")
    return f"0-{math.ceil(trials / per_task) - 1}%{throttle}"


def modelled_wall_s(
    trials: int, throttle: int, trial_s: float, start_s: float = 0.0, per_task: int = 1
) -> float:
    """Wall time of an array (queueing not counted): ceil(N/per_task) tasks, ``throttle`` at a
    time, each paying ``start_s`` once and running ``per_task`` trials of ``trial_s``. With the
    defaults: ceil(N/K) waves of one trial each (chapter 07); chapter 08 batches trials per task
    when the start-up is not small next to a trial."""
    tasks = math.ceil(trials / per_task)
    return math.ceil(tasks / throttle) * (start_s + per_task * trial_s)


def write_plan(
    work: Path, points: list[dict], epochs: int, seed: int = 0, samples: int = 0,
    per_task: int = 1, checkpoints: list[str] | None = None,
) -> None:  # fmt: skip
    """The array's plan (its trials and how to run them), read by every task from ``work``;
    ``checkpoints``: one file per point that its trial resumes from and writes (chapter 08's
    synchronous rungs), else None."""
    plan = {"points": points, "epochs": epochs, "seed": seed, "samples": samples}
    (work / "plan.json").write_text(
        json.dumps({**plan, "per_task": per_task, "checkpoints": checkpoints})
    )


def task_command(work: Path | str, task: str = "$SLURM_ARRAY_TASK_ID") -> str:
    return f"{LAUNCH_STAMP}; {python()} -m hpclab.cluster.arrays {work} {task}"


def submit_array(
    cluster: Cluster,
    site: SiteProfile,
    work: Path,
    trials: int,
    throttle: int,
    per_task: int = 1,
    name: str = "search",
) -> Job:
    """Submit the plan in ``work`` as one array: ceil(trials/per_task) tasks, throttle at once."""
    spec = JobSpec(name=name, array=array_option(trials, throttle, per_task), time="00:10:00",
                   mem="512M")  # fmt: skip
    return submit(cluster, site, spec, [task_command(work)], workdir=work)


def read_results(work: Path, trials: int) -> dict[int, dict[str, Any]]:
    """The trials whose result file is there (index -> :func:`hpclab.trial.timed_trials` row)."""
    out = {}
    for i in range(trials):
        path = work / f"trial-{i}.json"
        if path.exists():
            out[i] = json.loads(path.read_text())
    return out


def run_array(config: ArrayConfig, progress: Progress) -> Result:
    cluster = require_cluster()
    site = local.site_profile(cluster)
    work = new_workdir("array")
    points = grid(config.trials)
    write_plan(work, points, config.epochs, samples=config.samples)
    t0 = time.monotonic()
    t_submit = clock()
    job = submit_array(cluster, site, work, config.trials, config.throttle)
    progress.update(
        0, 2, f"array job {job.job_id}: {config.trials} tasks, {config.throttle} at once"
    )
    job.result(timeout_s=600, progress=progress)
    array_s = time.monotonic() - t0
    results = read_results(work, config.trials)
    seen = clock()
    records = [  # the search's own record (chapter 08), one per task
        {"kind": "trial", "task": i,
         **TrialRecord.from_output(i, p, results[i], t_submit, seen, t_submit).as_dict()}
        for i, p in enumerate(points)
    ]  # fmt: skip
    summary = {
        "kind": "summary",
        "job_id": job.job_id,
        "trials": config.trials,
        "array_wall_s": array_s,
    }
    if config.serial:
        sdir = new_workdir("array-serial")
        write_plan(sdir, points, config.epochs, samples=config.samples)
        progress.update(1, 2, "the same trials one after another")
        t0 = time.monotonic()
        spec = JobSpec(name="search-serial", time="00:10:00", mem="512M")
        # The same tasks, one process each as in the array: only the parallelism differs.
        loop = [f"for i in $(seq 0 {config.trials - 1}); do", task_command(sdir, "$i"), "done"]
        sjob = submit(cluster, site, spec, loop, workdir=sdir)
        sjob.result(timeout_s=600, progress=progress)
        summary["serial_wall_s"] = time.monotonic() - t0
        summary["speedup"] = summary["serial_wall_s"] / array_s
    best = max(records, key=lambda r: r["val_acc"])
    summary |= {
        "best_lr": best["params"]["lr"],
        "best_batch": best["params"]["batch_size"],
        "best_val_acc": best["val_acc"],
    }
    progress.update(2, 2, "done")
    return make_result("job-array", config, [summary, *records], ran_elsewhere=True)


def main(work_dir: str, task: int) -> None:
    """One array task: its ``per_task`` trials of the plan, one ``trial-<i>.json`` each."""
    from hpclab.trial import timed_trials

    work = Path(work_dir)
    plan = json.loads((work / "plan.json").read_text())
    first = task * plan["per_task"]
    indices = range(first, min(first + plan["per_task"], len(plan["points"])))
    points = [plan["points"][i] for i in indices]
    files = plan.get("checkpoints")
    results = timed_trials(points, plan["epochs"], plan["seed"], plan["samples"],
                           [files[i] for i in indices] if files else None)  # fmt: skip
    for i, res in zip(indices, results, strict=True):  # each written as soon as it is done
        tmp = work / f".trial-{i}.json.tmp"
        tmp.write_text(json.dumps({**res, "task": task}))
        os.replace(tmp, work / f"trial-{i}.json")  # atomic: a reader never sees half a file


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
