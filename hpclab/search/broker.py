"""A private Redis for Celery, and Celery workers, started and stopped by the course (chapter 08).

Redis is Debian's ``redis-server`` run on a **unix socket** in a directory of its own (mode 0700):
no TCP port to collide with another student's on a shared node, nothing reachable from outside,
no persistence. Workers are ``celery worker`` processes in their own session, so stopping them
takes their pool children too (:func:`hpclab.dist.reap.kill_tree`); nothing is left behind.

Celery settings that matter for trials, each for a reason:

- ``task_acks_late`` + ``task_reject_on_worker_lost``: a task is acknowledged when it *ends*, and a
  task whose process dies is given back rather than acknowledged (``acks_late`` alone acks it);
  a worker that dies whole (the ``solo`` pool below) leaves its task unacknowledged until the
  ``visibility_timeout``, so the client resends a dead worker's trial itself
  (:mod:`hpclab.search.celery_backend`);
- ``worker_prefetch_multiplier=1``: a worker holds one trial at a time; a long trial does not sit
  on a queue of short ones another worker could run;
- the broker's ``visibility_timeout`` longer than any trial, or Redis hands a running trial to a
  second worker;
- the ``solo`` pool (one process per worker, no fork after import): forking a process that has
  initialised CUDA breaks CUDA in the child (DESIGN facts), so a GPU worker must not use prefork.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from hpclab.config import RunError
from hpclab.measure.oom import OomWatch, preflight
from hpclab.search.celery_app import BROKER_ENV, app_for


class BrokerError(RunError):
    """The broker or a worker could not be started or reached (one line says which and how)."""


def redis_server() -> str:
    """The redis-server binary: ``$HPCLAB_REDIS_SERVER`` (a site module's), else the PATH's."""
    return (
        os.environ.get("HPCLAB_REDIS_SERVER")
        or shutil.which("redis-server")
        or "/usr/bin/redis-server"
    )


def broker_problem() -> str | None:
    """None when the Celery backend can run here, else one sentence saying what is missing."""
    import importlib.util

    if importlib.util.find_spec("celery") is None or importlib.util.find_spec("redis") is None:
        return "Celery is not installed in this environment (pip install 'celery[redis]'): only the sequential backend runs."
    if not Path(redis_server()).exists():
        return "redis-server is not installed here (apt-get install redis-server): only the sequential backend runs."
    return None


@dataclass
class Redis:
    socket: Path
    proc: subprocess.Popen
    dir: Path

    @property
    def url(self) -> str:
        return f"redis+socket://{self.socket}"


def start_redis(timeout_s: float = 10.0) -> Redis:
    """Start ``redis-server`` on a unix socket in a fresh 0700 directory; wait until it answers."""
    exe = redis_server()
    if not Path(exe).exists():
        raise BrokerError(
            f"redis-server not found ({exe}): install it (apt-get install redis-server, or point "
            "HPCLAB_REDIS_SERVER at one), or use backend='sequential'"
        )
    d = Path(tempfile.mkdtemp(prefix="hpclab-redis-"))
    sock = d / "redis.sock"
    cmd = [
        exe, "--port", "0", "--unixsocket", str(sock), "--unixsocketperm", "700",
        "--save", "", "--appendonly", "no", "--dir", str(d), "--daemonize", "no",
        "--logfile", str(d / "redis.log"),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip
    redis = Redis(sock, proc, d)
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                log = d / "redis.log"
                tail = log.read_text(errors="replace")[-500:].strip() if log.exists() else ""
                raise BrokerError(f"redis-server exited with code {proc.returncode}: {tail}")
            if ping(redis.url):
                return redis
            time.sleep(0.05)
        raise BrokerError(f"redis-server did not answer on {sock} within {timeout_s:.0f} s")
    except BaseException:
        stop_redis(redis)
        raise


def ping(url: str) -> bool:
    """True if a Redis answers at ``url``."""
    import redis as redis_client

    try:
        client_url = url.replace("redis+socket://", "unix://", 1)  # kombu's scheme, redis-py's
        return bool(redis_client.Redis.from_url(client_url, socket_timeout=1).ping())
    except (redis_client.exceptions.ConnectionError, redis_client.exceptions.TimeoutError, OSError):
        return False


def stop_redis(redis: Redis) -> None:
    from hpclab.dist.reap import kill_tree

    kill_tree([redis.proc.pid], grace_s=3)
    shutil.rmtree(redis.dir, ignore_errors=True)


@dataclass
class Workers:
    procs: list[subprocess.Popen]
    log: Path
    oom: OomWatch  # made before they started: a worker's SIGKILL is checked against it


def check_workers_fit(n: int) -> None:
    """Refuse ``n`` workers that cannot fit in memory (each is a Python + PyTorch process)."""
    preflight(f"{n} Celery workers", 0, n, "use fewer workers")


def worker_argv(i: int) -> list[str]:
    """The command of Celery worker ``i`` (named ``w{i}@host``): here, or in a job script."""
    return [
        sys.executable, "-m", "celery", "-A", "hpclab.search.tasks", "worker",
        "--pool=solo", "--concurrency=1", "--prefetch-multiplier=1", "--without-gossip",
        "--without-mingle", "--without-heartbeat", "-n", f"w{i}@%h", "--loglevel=WARNING",
    ]  # fmt: skip


def start_workers(
    url: str, n: int, threads: int = 1, log_dir: Path | None = None, timeout_s: float = 60.0
) -> Workers:
    """``n`` Celery workers (solo pool, one task at a time each) on the broker at ``url``.

    Each worker runs with ``threads`` torch/OpenMP threads; returns once all answer a ping.
    """
    check_workers_fit(n)
    log_dir = log_dir or Path(tempfile.mkdtemp(prefix="hpclab-celery-"))
    env = dict(os.environ, **{BROKER_ENV: url}, OMP_NUM_THREADS=str(threads))
    watch, procs = OomWatch(), []
    for i in range(n):
        cmd = worker_argv(i)
        with open(log_dir / f"worker{i}.log", "ab") as out:
            procs.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True))  # fmt: skip
    workers = Workers(procs, log_dir, watch)
    app = app_for(url)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        dead = [p for p in procs if p.poll() is not None]
        if dead:
            stop_workers(workers)
            tail = (log_dir / "worker0.log").read_text(errors="replace")[-800:]
            raise BrokerError(f"a Celery worker exited with code {dead[0].returncode}: {tail}")
        replies = app.control.ping(timeout=0.5) or []
        if len(replies) >= n:
            return workers
    stop_workers(workers)
    raise BrokerError(f"only some of {n} Celery workers answered within {timeout_s:.0f} s")


def stop_workers(workers: Workers, grace_s: float = 5.0) -> None:
    """TERM (a warm shutdown: the running task ends first), KILL after ``grace_s``."""
    from hpclab.dist.reap import kill_tree

    kill_tree([p.pid for p in workers.procs], grace_s=grace_s)
    for p in workers.procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


@contextmanager
def celery_pool(workers: int, threads: int = 1) -> Iterator[tuple[str, Workers]]:
    """A private Redis and ``workers`` Celery workers for the ``with`` block; yields the broker
    URL and the workers (worker ``i`` is named ``w{i}@host``). Everything is stopped on exit,
    also after an error or an interrupt."""
    redis = start_redis()
    try:
        # The workers' logs live in Redis's private directory: removed with it at the end.
        pool = start_workers(redis.url, workers, threads, log_dir=Path(redis.dir))
        try:
            yield redis.url, pool
        except BaseException:
            # Stopped mid-search: a worker's warm shutdown would finish its trial first.
            stop_workers(pool, grace_s=0.5)
            raise
        stop_workers(pool)
    finally:
        stop_redis(redis)
