"""submitit from chapter 07's :class:`JobSpec`: one way to describe a job (chapters 07-08).

submitit (``pip install submitit``) pickles a Python function and its arguments, submits a job
(or, with ``map_array``, one job array) that unpickles and calls it, and pickles the result back.
:func:`executor` builds its ``SlurmExecutor`` from the same :class:`JobSpec` and site profile as
a job script: the ``#SBATCH`` lines are :func:`hpclab.cluster.script.directives` (handed to
submitit as ``additional_parameters``, so they replace submitit's own), the setup lines are the
site's plus :func:`hpclab.cluster.runner.job_env` (this checkout on ``PYTHONPATH``), and the
throttle ``%K`` of ``spec.array`` becomes ``array_parallelism``. ``sbatch`` runs with the
cluster's environment (``SLURM_CONF`` of the local cluster, ``PATH``).

What submitit does where there is no accounting database (the local cluster:
``AccountingStorageType=accounting_storage/none``; ``sacct`` exits 1, "Slurm accounting storage
is disabled"), read in submitit 1.5's source: ``Job.done()`` first looks for the result pickle
and returns True when it is there (a function that raised also leaves one, and ``result()``
re-raises its error); only without it does the ``SlurmInfoWatcher`` call ``sacct``, which then
fails: it logs "Bypassing sacct error ..., status may be inaccurate" as a warning on each call
and the state stays ``UNKNOWN``, which submitit counts as not finished. So a task that Slurm
killed before it wrote its pickle (``scancel``, time limit, out of memory, a node lost) makes
``job.result()`` wait for ever. :func:`wait_results` therefore never asks submitit's watcher:
it reads the result pickles and asks ``scontrol`` (:meth:`Cluster.states`, which works without
accounting) for the tasks that have none; a task that ended without a pickle is a failure with
its state, at once.
"""

from __future__ import annotations

import math
import os
import shlex
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hpclab.cluster.profiles import SiteProfile
from hpclab.cluster.runner import LAUNCH_STAMP, job_env
from hpclab.cluster.script import directives
from hpclab.cluster.slurm import Cluster, SlurmError
from hpclab.cluster.spec import JobSpec
from hpclab.progress import Progress


def parameters(spec: JobSpec, site: SiteProfile) -> dict[str, Any]:
    """submitit's ``update_parameters`` for ``spec`` at ``site`` (checked against it first)."""
    spec.check_site(site)
    extra: dict[str, Any] = {}
    for d in directives(spec, site):
        key, eq, value = d.lstrip("-").partition("=")
        if key == "array":  # submitit writes --array itself (map_array), with our throttle
            continue
        # submitit writes its defaults under underscore names (job_name, time...): ours win
        extra[key.replace("-", "_")] = value if eq else True
    env = [f"export {k}={shlex.quote(v)}" for k, v in job_env().items()]
    setup = [*env, *site.setup, f'export SLURM_TMPDIR="{site.tmpdir}"', LAUNCH_STAMP]
    throttle = spec.array.partition("%")[2]
    return {
        "additional_parameters": extra,
        "setup": setup,
        "array_parallelism": int(throttle) if throttle else 256,
        "time": math.ceil(spec.time_s / 60),  # submitit's time is minutes
        "stderr_to_stdout": True,
    }


def executor(spec: JobSpec, site: SiteProfile, folder: Path) -> Any:
    """A ``submitit.SlurmExecutor`` writing into ``folder`` for jobs described by ``spec``."""
    import sys

    import submitit

    ex = submitit.SlurmExecutor(folder=folder, python=sys.executable)
    params = parameters(spec, site)
    # The job runs in its folder, like every job of hpclab.cluster (``sbatch --chdir``).
    params["additional_parameters"]["chdir"] = str(folder)
    ex.update_parameters(**params)
    return ex


@contextmanager
def cluster_environ(cluster: Cluster) -> Iterator[None]:
    """submitit runs ``sbatch`` with this process's environment: the cluster's, for the block."""
    saved = dict(os.environ)
    os.environ.update(cluster.env())
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def map_array(cluster: Cluster, site: SiteProfile, spec: JobSpec, folder: Path, fn, *args) -> list:
    """``executor.map_array(fn, *args)`` as one array of ``spec``; one submitit job per item."""
    ex = executor(spec, site, folder)
    with cluster_environ(cluster):
        return ex.map_array(fn, *args)


def wait_results(
    cluster: Cluster,
    jobs: list,
    timeout_s: float = 600.0,
    progress: Progress | None = None,
    grace_s: float = 3.0,
) -> Iterator[tuple[int, Any, str]]:
    """Yield ``(index, result, error)`` for each job as it ends, in the order they end.

    ``error`` is "" for a result, the function's exception for a function that raised, or the
    Slurm state of a task that ended without a result (then ``result`` is None). Ctrl-C, a
    cancelled ``progress`` or the timeout cancel the array (the caller sees the exception)."""
    array_id = jobs[0].job_id.split("_")[0] if jobs else ""
    pending = dict(enumerate(jobs))
    ended_at: dict[int, float] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while pending:
            states = {s.job_id: s for s in cluster.states(array_id)} if array_id else {}
            # Tasks not yet started share one record ("123_2-7%2"): theirs, when not listed.
            rest = next((s for s in states.values() if not s.job_id.rpartition("_")[2].isdigit()),
                        None)  # fmt: skip
            for i, job in list(pending.items()):
                if job.paths.result_pickle.exists():
                    pending.pop(i)
                    try:
                        yield i, job.result(), ""
                    except Exception as exc:  # noqa: BLE001 - the function's error, reported
                        yield i, None, f"{type(exc).__name__}: {str(exc).splitlines()[-1][:300]}"
                    continue
                st = states.get(job.job_id) or rest
                if st is not None and not st.done:
                    continue
                # Ended (or gone from the controller) with no pickle yet: give the file a moment.
                first = ended_at.setdefault(i, time.monotonic())
                if time.monotonic() - first > grace_s:
                    pending.pop(i)
                    what = f"ended {st.state} ({st.exit_code})" if st else "is unknown to Slurm"
                    yield i, None, f"task {job.job_id} {what} without a result"
            if not pending:
                break
            if progress is not None:
                progress.check()
            if time.monotonic() > deadline:
                raise SlurmError(f"array {array_id} not done after {timeout_s:g} s; cancelled")
            time.sleep(cluster.poll_s)
    except BaseException:
        if array_id:
            cluster.cancel(array_id)
        raise
