"""Celery workers inside one Slurm allocation (chapter 08).

Instead of a job per trial, ONE ``sbatch`` job holds K cores and runs K Celery workers in it
(background processes of the job script, one core each); the notebook feeds them trials through
its private Redis, as with local workers (:mod:`hpclab.search.broker`). The job pays the queue
and the start-up once; each trial then costs milliseconds of dispatch. The job is cancelled when
the search ends, also after an error or an interrupt, and its end is waited for, so no worker,
Redis or job is left behind.

Where the broker is: Redis listens on a unix socket in a private 0700 directory of this host.
The local cluster's nodes are this machine, so its jobs reach the socket. On a real cluster the
compute nodes cannot reach a unix socket on the login or JupyterHub node, and a Redis on TCP
would need a password and a port open to every node (and shared nodes forbid guessing a free
one): the course does not open that, and :func:`celery_allocation` refuses with one line naming
the backends that do run there (``array``, ``submitit``, or Celery workers on this node).
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from hpclab.cluster.slurm import TERMINAL, SlurmError
from hpclab.config import ConfigError
from hpclab.search.broker import BrokerError, start_redis, stop_redis, worker_argv

_LIVE = ("PENDING", "CONFIGURING", "RUNNING")


@dataclass
class _JobWorker:
    """One worker of the job, with a ``Popen``-like ``poll()``: None while the job runs."""

    pool: AllocationPool
    returncode: int | None = None

    def poll(self) -> int | None:
        if self.pool.ended():
            self.returncode = 1
        return self.returncode


@dataclass
class AllocationPool:
    job: Any  # hpclab.cluster.slurm.Job
    workers: int
    procs: list[_JobWorker] = field(default_factory=list)
    state: str = "PENDING"
    _checked: float = 0.0

    def ended(self) -> bool:
        """The job is over (asks the scheduler at most twice a second); ``state`` is then its
        final state: a job caught while COMPLETING (its processes being killed, a transition
        that takes seconds, longer on a loaded node) is waited for until CANCELLED, TIMEOUT..."""
        if self.state not in TERMINAL and time.monotonic() - self._checked > 0.5:
            self._checked = time.monotonic()
            self.state = self.job.state().state
            if self.state == "COMPLETING":
                self._settle()
        return self.state not in _LIVE

    def _settle(self, timeout_s: float = 60.0) -> None:
        try:
            self.state = self.job.wait(timeout_s=timeout_s).state
        except SlurmError:  # still ending after a minute (a stuck node): say what it is doing
            self.state = self.job.state().state


def worker_commands(url: str, workers: int, threads: int = 1) -> list[str]:
    """The job script's work: ``workers`` Celery workers in the background, then ``wait``."""
    lines = [f"export HPCLAB_CELERY_BROKER={shlex.quote(url)}", f"export OMP_NUM_THREADS={threads}"]
    for i in range(workers):
        argv = " ".join(shlex.quote(a) for a in worker_argv(i))
        lines.append(f'{argv} > "worker{i}.log" 2>&1 &')
    lines.append("wait")
    return lines


def _ready(pool: AllocationPool, url: str, timeout_s: float) -> None:
    from hpclab.search.celery_app import app_for

    app = app_for(url)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pool.ended():
            raise BrokerError(f"the workers' job {pool.job.job_id} ended {pool.state} before "
                              f"its workers answered:\n{pool.job.log(tail=10)}")  # fmt: skip
        if pool.state == "RUNNING" and len(app.control.ping(timeout=0.5) or []) >= pool.workers:
            return
        time.sleep(0.2)
    raise BrokerError(
        f"{pool.workers} Celery workers in job {pool.job.job_id} did not answer within "
        f"{timeout_s:.0f} s (state {pool.state})"
    )


def workers_alive(url: str) -> list[int]:
    """Live worker processes of this host whose broker is ``url`` (the local cluster's nodes
    are this host; a zombie left to a PID 1 that does not reap is dead and not counted)."""
    import psutil

    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if "hpclab.search.tasks" in " ".join(p.info["cmdline"] or ()):
                if p.environ().get("HPCLAB_CELERY_BROKER") == url:
                    out.append(p.pid)
        except psutil.Error:
            continue
    return out


@contextmanager
def celery_allocation(
    workers: int, threads: int = 1, timeout_s: float = 300.0
) -> Iterator[tuple[str, AllocationPool]]:
    """A private Redis and ONE Slurm job running ``workers`` Celery workers, for the block;
    yields the broker URL and the pool (``pool.procs[i].poll()`` says whether worker ``i``'s
    job still runs). The job is cancelled and waited for on exit, then Redis is stopped."""
    from hpclab.cluster import local
    from hpclab.cluster.runner import new_workdir, require_cluster, submit
    from hpclab.cluster.spec import JobSpec

    cluster = require_cluster()
    if not cluster.local:
        raise ConfigError(
            "where='slurm' runs Celery workers only on the local cluster: this notebook's Redis "
            "listens on a unix socket the compute nodes of a real cluster cannot reach; "
            "allowed there: backend='array' or 'submitit', or where='local'"
        )
    site = local.site_profile(cluster)
    spec = JobSpec(name="celery-workers", cpus_per_task=workers * threads, time="00:20:00",
                   mem="2G")  # fmt: skip
    redis = start_redis()
    job = None
    try:
        job = submit(cluster, site, spec, worker_commands(redis.url, workers, threads),
                     new_workdir("celery-workers"))  # fmt: skip
        pool = AllocationPool(job, workers)
        pool.procs = [_JobWorker(pool) for _ in range(workers)]
        _ready(pool, redis.url, timeout_s)
        yield redis.url, pool
    finally:
        try:
            if job is not None:
                job.cancel()
                job.wait(timeout_s=60)
                deadline = time.monotonic() + 15  # Slurm signals them; wait until they are gone
                while workers_alive(redis.url) and time.monotonic() < deadline:
                    time.sleep(0.2)
        finally:
            stop_redis(redis)
