"""Experiment ``slurm-hello``: your first job, on 1 or N nodes (chapter 07, section 1).

The job runs one task per node (``srun``) that reports its node, the cores it may use
(``nproc``: what the scheduler bound it to), the cores the node has, and its GPUs
(``nvidia-smi -L``). Records: one per task (``nproc``, ``node_cores``, ``gpus``), then the
job's state changes with their time since submission (PENDING -> RUNNING -> COMPLETED, as the
controller reported them), and what accounting says after the fact (``sacct``).

Why the node has many cores but the job sees ``cpus_per_task``: the scheduler binds a job to the
cores it asked for (cgroups, or CPU affinity as on the local cluster: TaskPlugin=task/affinity).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hpclab.cluster import local
from hpclab.cluster.runner import require_cluster, submit
from hpclab.cluster.spec import JobSpec
from hpclab.config import Config, param
from hpclab.progress import Progress
from hpclab.results import Result, make_result

REPORT = (
    "srun bash -c 'echo \"task node=$SLURMD_NODENAME nproc=$(nproc) "
    "node_cores=$(getconf _NPROCESSORS_ONLN) gpus=$(nvidia-smi -L 2>/dev/null | grep -c GPU)\"'"
)
_TASK = re.compile(r"^task node=(\S+) nproc=(\d+) node_cores=(\d+) gpus=(\d+)", re.M)


@dataclass(frozen=True)
class HelloConfig(Config):
    nodes: int = param(1, min=1, max=64, help="nodes (one task on each)")
    cpus_per_task: int = param(1, min=1, max=256, help="cores the task asks for")
    time: str = param("00:02:00", help="time limit")


def hello_spec(config: HelloConfig) -> JobSpec:
    return JobSpec(
        name="hello",
        nodes=config.nodes,
        ntasks_per_node=1,
        cpus_per_task=config.cpus_per_task,
        time=config.time,
        mem="256M",
    )


def parse_tasks(log: str) -> list[dict]:
    return [
        {"node": n, "nproc": int(p), "node_cores": int(c), "gpus": int(g)}
        for n, p, c, g in _TASK.findall(log)
    ]


def run_hello(config: HelloConfig, progress: Progress) -> Result:
    cluster = require_cluster()
    site = local.site_profile(cluster)
    job = submit(cluster, site, hello_spec(config), [REPORT])
    progress.update(0, 3, f"job {job.job_id} submitted")
    final = job.result(timeout_s=120, progress=progress)
    progress.update(2, 3, f"job {job.job_id} {final.state}")
    records: list[dict] = [
        {"kind": "task", "job_id": job.job_id, **t} for t in parse_tasks(job.log())
    ]
    records += [
        {"kind": "state", "job_id": job.job_id, "state": s, "seconds": t} for t, s in job.history
    ]
    acct = cluster.accounting(job.job_id)
    records += [
        {"kind": "sacct", "job_id": a.job_id, "state": a.state, "exit_code": a.exit_code}
        for a in acct
    ]
    progress.update(3, 3, "done")
    return make_result("slurm-hello", config, records, ran_elsewhere=True)
