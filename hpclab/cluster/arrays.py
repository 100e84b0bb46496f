"""Experiment ``job-array``: a parameter search as a Slurm job array (chapter 07, section 4).

Nakayama (2017): a parameter search hands parameter combinations to processes or machines (grid
or random search). On Slurm that is one job array, ``--array=0-(N-1)%K``: N tasks, each with its
``SLURM_ARRAY_TASK_ID``, at most K running at once (K = the GPUs or nodes you may use, so the
array does not flood the queue). Each task trains chapter 06's tiny model on the digits with
one (learning rate, batch size) pair and writes its accuracy; the notebook collects them.

The same trials also run one after another in one job, for the wall-time comparison. The
model of both: an array of N trials of t seconds with K at once takes about ceil(N/K) x t.

Run one trial by hand: ``python -m hpclab.cluster.arrays OUT_DIR TASK_ID``.
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

from hpclab.cluster import local
from hpclab.cluster.runner import new_workdir, python, require_cluster, submit
from hpclab.cluster.spec import JobSpec
from hpclab.config import Config, param
from hpclab.progress import Progress
from hpclab.results import Result, make_result

LRS = (0.01, 0.03, 0.1, 0.3)
BATCHES = (16, 64)


@dataclass(frozen=True)
class ArrayConfig(Config):
    trials: int = param(8, min=1, max=len(LRS) * len(BATCHES), quick=2, help="trials (grid points)")
    throttle: int = param(2, min=1, max=64, help="tasks running at once (the throttle of --array)")
    steps: int = param(60, min=1, max=10000, quick=20, help="training steps per trial")
    serial: bool = param(True, help="also run the trials one after another, for the wall time")


def grid(trials: int) -> list[dict]:
    """The first ``trials`` points of the (lr, batch) grid, in task-id order."""
    points = [{"lr": lr, "batch": b} for b, lr in itertools.product(BATCHES, LRS)]
    return points[:trials]


def array_option(trials: int, throttle: int) -> str:
    return f"0-{trials - 1}%{throttle}"


def modelled_wall_s(
    trials: int, throttle: int, trial_s: float, start_s: float = 0.0, per_task: int = 1
) -> float:
    """Wall time of an array (queueing not counted): ceil(N/per_task) tasks, ``throttle`` at a
    time, each paying ``start_s`` once and running ``per_task`` trials of ``trial_s``. With the
    defaults: ceil(N/K) waves of one trial each (chapter 07); chapter 08 batches trials per task
    when the start-up is not small next to a trial."""
    tasks = math.ceil(trials / per_task)
    return math.ceil(tasks / throttle) * (start_s + per_task * trial_s)


def trial(point: dict, steps: int) -> dict:
    """Train the tiny model on the digits with one (lr, batch); accuracy on held-out digits."""
    import torch

    from hpclab.train import accuracy, digits, make_model, train_step

    torch.set_num_threads(1)
    x, y = digits()
    n = int(0.8 * len(x))
    model = make_model("tiny", x.shape[1], seed=0)
    opt = torch.optim.SGD(model.parameters(), lr=point["lr"])
    g = torch.Generator().manual_seed(0)
    t0 = time.perf_counter()
    for _ in range(steps):
        idx = torch.randint(0, n, (point["batch"],), generator=g)
        train_step(model, opt, x[idx], y[idx])
    return {**point, "accuracy": accuracy(model, x[n:], y[n:]), "train_s": time.perf_counter() - t0}


def _commands(work: Path, task: str) -> list[str]:
    return [f"{python()} -m hpclab.cluster.arrays {work} {task}"]


def run_array(config: ArrayConfig, progress: Progress) -> Result:
    cluster = require_cluster()
    site = local.site_profile(cluster)
    work = new_workdir("array")
    (work / "grid.json").write_text(
        json.dumps({"points": grid(config.trials), "steps": config.steps})
    )
    spec = JobSpec(
        name="search",
        array=array_option(config.trials, config.throttle),
        time="00:10:00",
        mem="512M",
    )
    t0 = time.monotonic()
    job = submit(cluster, site, spec, _commands(work, "$SLURM_ARRAY_TASK_ID"), workdir=work)
    progress.update(
        0, 2, f"array job {job.job_id}: {config.trials} tasks, {config.throttle} at once"
    )
    job.result(timeout_s=600, progress=progress)
    array_s = time.monotonic() - t0
    records = [
        {"kind": "trial", "task": i, **json.loads((work / f"trial-{i}.json").read_text())}
        for i in range(config.trials)
    ]
    summary = {
        "kind": "summary",
        "job_id": job.job_id,
        "trials": config.trials,
        "array_wall_s": array_s,
    }
    if config.serial:
        sdir = new_workdir("array-serial")
        (sdir / "grid.json").write_text((work / "grid.json").read_text())
        loop = [f"for i in $(seq 0 {config.trials - 1}); do", *_commands(sdir, "$i"), "done"]
        progress.update(1, 2, "the same trials one after another")
        t0 = time.monotonic()
        sjob = submit(
            cluster,
            site,
            JobSpec(name="search-serial", time="00:10:00", mem="512M"),
            loop,
            workdir=sdir,
        )
        sjob.result(timeout_s=600, progress=progress)
        summary["serial_wall_s"] = time.monotonic() - t0
        summary["speedup"] = summary["serial_wall_s"] / array_s
    best = max(records, key=lambda r: r["accuracy"])
    summary |= {
        "best_lr": best["lr"],
        "best_batch": best["batch"],
        "best_accuracy": best["accuracy"],
    }
    progress.update(2, 2, "done")
    return make_result("job-array", config, [summary, *records])


def main(out_dir: str, task: int) -> None:
    out = Path(out_dir)
    plan = json.loads((out / "grid.json").read_text())
    result = trial(plan["points"][task], plan["steps"])
    result["node"] = os.environ.get("SLURMD_NODENAME", "")
    (out / f"trial-{task}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
