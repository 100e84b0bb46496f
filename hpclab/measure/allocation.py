"""The Slurm allocation this process runs in, and who can reach its Jupyter server (chapters 00, 07).

A student's JupyterLab on a cluster's hub usually runs *inside* a Slurm job: the job, not the
node, decides how many cores, how much memory and which GPUs are theirs, and for how long.
Slurm exports what it granted as environment variables (``SLURM_JOB_ID``,
``SLURM_CPUS_PER_TASK``/``SLURM_CPUS_ON_NODE``, ``SLURM_MEM_PER_NODE`` in MiB,
``SLURM_GPUS_ON_NODE``, ``SLURM_JOB_END_TIME`` in epoch seconds where the site's Slurm sets it);
``squeue -o %L`` tells the time left when it does not.

Two things go wrong often enough for ``hpclab doctor`` to say so:

- **The job sees more cores than it was given.** With ``TaskPlugin=task/none`` (or no cgroup
  confinement) a 1-core job's affinity mask is the whole node: libraries then start one thread per
  node core and every thread waits for the one core the scheduler accounts to you.
- **The server listens beyond loopback.** A single-user server bound to ``0.0.0.0`` on a compute
  node is reachable by every user of the cluster's network (its token still guards it); a hub
  that runs on the same host as the job can keep it on ``127.0.0.1``.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlparse


@dataclass(frozen=True)
class Allocation:
    """What Slurm granted this job on this node (chapter 07); ``None`` fields: not known."""

    job_id: str
    cpus: int | None
    mem_gb: float | None
    gpus: int | None
    time_left_s: float | None
    partition: str | None
    node: str | None


def _int(value: str | None) -> int | None:
    try:
        return int(str(value).split("(")[0])  # SLURM_CPUS_ON_NODE may read "2(x3)" on some sites
    except (TypeError, ValueError):
        return None


def parse_time_left(text: str) -> float | None:
    """Seconds in Slurm's ``[days-]hours:minutes:seconds`` (``squeue -o %L``); None if unknown.

    >>> parse_time_left("1-02:03:04"), parse_time_left("05:00"), parse_time_left("UNLIMITED")
    (93784.0, 300.0, None)
    """
    text = text.strip()
    days = 0
    if "-" in text:
        head, text = text.split("-", 1)
        if not head.isdigit():
            return None
        days = int(head)
    parts = text.split(":")
    if not parts or not all(p.isdigit() for p in parts) or len(parts) > 3:
        return None
    seconds = 0
    for p in parts:
        seconds = seconds * 60 + int(p)
    return float(days * 86400 + seconds)


def _squeue_time_left(job_id: str) -> float | None:
    squeue = shutil.which("squeue")
    if not squeue:
        return None
    try:
        out = subprocess.run(
            [squeue, "-h", "-j", job_id, "-o", "%L"],
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_time_left(out.stdout) if out.returncode == 0 else None


def slurm_allocation(env: Mapping[str, str] | None = None) -> Allocation | None:
    """The allocation from Slurm's variables (``env``, default ``os.environ``); None outside a job."""
    env = os.environ if env is None else env
    job_id = env.get("SLURM_JOB_ID")
    if not job_id:
        return None
    cpus = _int(env.get("SLURM_CPUS_PER_TASK")) or _int(env.get("SLURM_CPUS_ON_NODE"))
    mem_mib = _int(env.get("SLURM_MEM_PER_NODE"))
    if mem_mib is None and _int(env.get("SLURM_MEM_PER_CPU")) and cpus:
        mem_mib = _int(env.get("SLURM_MEM_PER_CPU")) * cpus
    end = _int(env.get("SLURM_JOB_END_TIME"))
    if end:
        time_left = max(0.0, end - time.time())
    elif env is os.environ:
        time_left = _squeue_time_left(job_id)
    else:
        time_left = None
    return Allocation(
        job_id=job_id,
        cpus=cpus,
        mem_gb=mem_mib / 1024 if mem_mib else None,
        gpus=_int(env.get("SLURM_GPUS_ON_NODE")),
        time_left_s=time_left,
        partition=env.get("SLURM_JOB_PARTITION"),
        node=env.get("SLURMD_NODENAME") or env.get("SLURM_JOB_NODELIST"),
    )


def server_bind_host(env: Mapping[str, str] | None = None) -> str | None:
    """The host a hub-spawned Jupyter server listens on (from ``JUPYTERHUB_SERVICE_URL``)."""
    env = os.environ if env is None else env
    url = env.get("JUPYTERHUB_SERVICE_URL")
    return urlparse(url).hostname if url else None


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``; False for 0.0.0.0 and real interfaces."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def format_duration(seconds: float) -> str:
    """``5400`` -> ``'1 h 30 min'``; ``59`` -> ``'59 s'``."""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds} s"
    h, rem = divmod(seconds, 3600)
    m = rem // 60
    return f"{h} h {m} min" if h else f"{m} min"
