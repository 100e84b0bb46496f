"""Experiment ``staging-job``: chapter 04's staging, run as a job step (chapter 07, section 5).

Guan (2019) and Mao (2017): inside a job, copy the data set to node-local storage
(``$SLURM_TMPDIR``: private to the job, removed after it; the node's disk, or a RAM-backed /tmp
counted against the job's memory where nodes have no disk, as on Perlmutter) and read it from there, instead of
many small reads from the shared file system every other job also uses. The job runs chapter
04's ``staging`` experiment unchanged (``srun python -m hpclab.cli run staging --local
"$SLURM_TMPDIR" --json``): the same code, now on a compute node, into the job's scratch. Its
records come back with the node and the scratch directory the job was given.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from hpclab.cluster import local
from hpclab.cluster.runner import new_workdir, python, require_cluster, submit
from hpclab.cluster.spec import JobSpec
from hpclab.config import Config, param
from hpclab.progress import Progress
from hpclab.results import Result, make_result


@dataclass(frozen=True)
class StagingJobConfig(Config):
    files: int = param(2000, min=10, max=200000, quick=200, help="samples (small files) to stage")


def staging_commands(files: int, out: str) -> list[str]:
    return [
        f"srun {python()} -m hpclab.cli run staging --files {files} "
        f'--local "$SLURM_TMPDIR" --json > {out}',
        'echo "scratch $SLURMD_NODENAME $SLURM_TMPDIR"',
    ]


def run_staging_job(config: StagingJobConfig, progress: Progress) -> Result:
    cluster = require_cluster()
    site = local.site_profile(cluster)
    work = new_workdir("staging")
    spec = JobSpec(name="stage", time="00:10:00", mem="1G")
    job = submit(
        cluster, site, spec, staging_commands(config.files, str(work / "staging.json")), work
    )
    progress.update(0, 1, f"job {job.job_id} stages {config.files} files")
    job.result(timeout_s=300, progress=progress)
    inner = json.loads((work / "staging.json").read_text())
    where = [ln.split()[1:] for ln in job.log().splitlines() if ln.startswith("scratch ")]
    node, tmpdir = (where[0] + ["", ""])[:2] if where else ("", "")
    records = [
        {**r, "job_id": job.job_id, "node": node, "slurm_tmpdir": tmpdir} for r in inner["records"]
    ]
    progress.update(1, 1, "done")
    return make_result("staging-job", config, records, ran_elsewhere=True)
