"""Where a job's files go and how a job runs this library's Python (chapter 07).

Every job gets its own directory under the jobs directory (``$HPCLAB_JOBS_DIR``, else
``jobs/`` in the user's data directory, which on a cluster is the shared home or project file
system that every node sees): the job script, its log, its checkpoints and its results live
there. A job runs ``python -m hpclab.cluster.<module>`` with the interpreter of this kernel and
this checkout on ``PYTHONPATH``, so the code that runs on the nodes is the code the notebook
imported.
"""

from __future__ import annotations

import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import hpclab
from hpclab.cluster import local
from hpclab.cluster.profiles import SiteProfile
from hpclab.cluster.script import render
from hpclab.cluster.slurm import Cluster, Job, SlurmError
from hpclab.cluster.spec import JobSpec
from hpclab.private import private_dir

# The job script stamps the moment it launches Python, for the start-up of a trial
# (:func:`hpclab.trial.timed_trials`); psutil's process creation time is only good to ~1 s.
LAUNCH_STAMP = "export HPCLAB_LAUNCHED_AT=$(date +%s.%N)"


def jobs_dir() -> Path:
    env = os.environ.get("HPCLAB_JOBS_DIR")
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("hpclab")) / "jobs"


def new_workdir(name: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = jobs_dir() / f"{name}-{stamp}"
    path, i = base, 1
    while path.exists():
        path, i = Path(f"{base}-{i}"), i + 1
    private_dir(path.parent)
    path.mkdir(mode=0o700)  # not exist_ok: a new directory per run
    return private_dir(path)


def python() -> str:
    """This kernel's interpreter, quoted for a shell line."""
    return shlex.quote(sys.executable)


def job_env() -> dict[str, str]:
    """What a job needs to import this checkout of hpclab (and keep torchrun's files private)."""
    root = str(Path(hpclab.__file__).resolve().parents[1])
    env = {"PYTHONPATH": root, "PYTHONUNBUFFERED": "1"}
    for key in ("HPCLAB_QUICK", "CI"):
        if key in os.environ:
            env[key] = os.environ[key]
    return env


def require_cluster() -> Cluster:
    """The Slurm of :func:`hpclab.cluster.local.connect`, or a one-line SlurmError: no Slurm is
    the environment's lack, not a bad argument (the CLI exits 1, not 2)."""
    cluster = local.connect()
    if cluster is None:
        raise SlurmError(local.why_not())
    return cluster


def submit(
    cluster: Cluster,
    site: SiteProfile,
    spec: JobSpec,
    commands: Sequence[str],
    workdir: Path | None = None,
) -> Job:
    """Check ``spec`` against the site, write the script into a fresh job directory, sbatch it."""
    spec.check_site(site)
    work = workdir or new_workdir(spec.name)
    script = render(spec, site, commands, output=str(work / "slurm-%j.out"), env=job_env())
    return cluster.submit(script, work)
