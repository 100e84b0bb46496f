"""How much of what a job asked for it used, and one's own forgotten jobs (chapter 07, section 7).

``seff JOBID`` on a cluster prints a finished job's *CPU efficiency* (CPU time used / (cores
allocated x wall time)) and *memory efficiency* (largest resident memory / memory requested),
from the accounting database (``sacct``'s TotalCPU and MaxRSS). A job at 25 % CPU efficiency
held four cores to use one: three cores that other users waited for, and a longer wait for
the job itself (Nakayama 2017 on shared lab servers; Mao 2017: ask for what you use).

The local cluster gathers job accounting (``JobAcctGatherType=jobacct_gather/linux``: each
step's processes sampled every second, read by ``sstat`` while the job runs) but keeps no
database (slurmdbd with MariaDB would cost CI its start-up time), so after the job nothing
holds its usage. Here the job measures itself, with the kernel's own figures: every task runs
its command under ``python -m hpclab.cluster.efficiency run -- CMD`` (this module), which
prints the command's CPU seconds and peak resident memory from ``wait4``'s rusage (what
jobacct_gather reads from /proc), and the batch script ends with ``sstat`` on its own batch
step (peak RSS as Slurm's accounting saw it). :func:`seff` turns the log into seff's figures.

:func:`mine` lists one's own jobs with their live usage (``squeue -u`` + ``sstat``): a job
that has run for hours at 0 CPU seconds is a forgotten one (Nakayama 2017: a 10-day GPU job
nobody looked at); :func:`cancel_mine` cancels one's own jobs by name (``scancel -u --name``).
"""

from __future__ import annotations

import getpass
import os
import re
import resource
import subprocess
import sys
import time
from dataclasses import dataclass

from hpclab.cluster.profiles import SiteProfile
from hpclab.cluster.slurm import Cluster, Job
from hpclab.cluster.spec import JobSpec, mem_mb

_USAGE = re.compile(r"^usage rank=(\d+) cpu_s=([\d.]+) maxrss_mb=([\d.]+) wall_s=([\d.]+)", re.M)
_SSTAT = re.compile(r"^sstat (\S+)\|(\d+)K", re.M)


def usage_command(command: str) -> str:
    """``command`` measured: prints its CPU seconds, peak RSS and wall seconds when it ends."""
    from hpclab.cluster.runner import python

    return f"{python()} -m hpclab.cluster.efficiency run -- {command}"


def work_command(cpu_s: float, mb: int) -> str:
    """A task that computes for ``cpu_s`` CPU seconds on one core, holding ``mb`` MB."""
    from hpclab.cluster.runner import python

    return f"{python()} -m hpclab.cluster.efficiency work {cpu_s} {mb}"


# The batch script's last line: its own batch step as the accounting plugin sampled it.
SSTAT_LINE = 'sstat -a -n -P -j "$SLURM_JOB_ID.batch" -o JobID,MaxRSS | sed "s/^/sstat /"'


def efficiency_commands(cpu_s: float, mb: int) -> list[str]:
    """One task in the batch step (so the batch step's sstat saw it), measured, then sstat."""
    return [usage_command(work_command(cpu_s, mb)), SSTAT_LINE]


@dataclass(frozen=True)
class Efficiency:
    """seff's figures for one finished job."""

    job_id: str
    cores: int
    mem_requested_mb: float
    cpu_s: float  # CPU seconds of every task together
    wall_s: float  # the longest task's wall time
    maxrss_mb: float  # the largest task's peak resident memory
    sstat_maxrss_mb: float | None  # the batch step's, from Slurm's accounting

    @property
    def cpu_efficiency(self) -> float:
        return self.cpu_s / (self.cores * self.wall_s) if self.wall_s > 0 else 0.0

    @property
    def mem_efficiency(self) -> float:
        return self.maxrss_mb / self.mem_requested_mb

    def report(self) -> str:
        """The figures the way ``seff`` prints them."""
        return "\n".join(
            [
                f"Job ID: {self.job_id}",
                f"Cores: {self.cores}",
                f"CPU Utilized: {self.cpu_s:.1f} s",
                f"CPU Efficiency: {self.cpu_efficiency:.0%} of "
                f"{self.cores * self.wall_s:.1f} core-seconds",
                f"Memory Utilized: {self.maxrss_mb:.0f} MB",
                f"Memory Efficiency: {self.mem_efficiency:.0%} of {self.mem_requested_mb:.0f} MB",
            ]
        )


def seff(job: Job, spec: JobSpec) -> Efficiency:
    """seff's figures for ``job`` (submitted from ``spec``) from its log, once it ended."""
    log = job.log()
    tasks = _USAGE.findall(log)
    if not tasks:
        raise ValueError(f"job {job.job_id} printed no usage line: was it run by usage_command?")
    sstat = [int(kb) / 1024 for _, kb in _SSTAT.findall(log)]
    return Efficiency(
        job_id=job.job_id,
        cores=spec.tasks * spec.cpus_per_task,
        mem_requested_mb=float(mem_mb(spec.mem) * spec.nodes),
        cpu_s=sum(float(t[1]) for t in tasks),
        wall_s=max(float(t[3]) for t in tasks),
        maxrss_mb=max(float(t[2]) for t in tasks),
        sstat_maxrss_mb=max(sstat) if sstat else None,
    )


def seff_of_requests(
    cluster: Cluster, site: SiteProfile, specs: list[JobSpec], cpu_s: float, mb: int
) -> list[Efficiency]:
    """The same work (``cpu_s`` CPU seconds on one core, ``mb`` MB) under each request in
    ``specs``, submitted at once; seff's figures of each, in order."""
    from hpclab.cluster.runner import submit

    jobs = [submit(cluster, site, spec, efficiency_commands(cpu_s, mb)) for spec in specs]
    out = []
    for job, spec in zip(jobs, specs, strict=True):
        job.result(timeout_s=120)
        out.append(seff(job, spec))
    return out


def mine(cluster: Cluster, user: str | None = None) -> list[dict]:
    """One's own jobs in the queue, each running one with its CPU seconds so far (``sstat``)."""
    user = user or getpass.getuser()
    text = cluster.run("squeue", "-h", "-u", user, "-o", "%i|%j|%T|%M|%l|%R")
    cols = ("job_id", "name", "state", "elapsed", "limit", "where_or_why")
    jobs = [dict(zip(cols, ln.split("|"), strict=False)) for ln in text.splitlines() if ln]
    for job in jobs:
        job["cpu_s"] = None
        if job["state"] == "RUNNING":
            out = cluster.run(
                "sstat", "-a", "-n", "-P", "-j", job["job_id"], "-o", "TresUsageInTot", check=False
            )
            cpu = re.findall(r"cpu=(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", out)
            job["cpu_s"] = sum(
                int(d or 0) * 86400 + int(h or 0) * 3600 + int(m) * 60 + int(s)
                for d, h, m, s in cpu
            )
    return jobs


def cancel_mine(cluster: Cluster, name: str, user: str | None = None) -> list[str]:
    """Cancel one's own queued or running jobs called ``name``; returns their ids."""
    if not name:
        raise ValueError("name='' would cancel every job of yours; allowed: a job name")
    ids = [j["job_id"] for j in mine(cluster, user) if j["name"] == name]
    if ids:
        cluster.run("scancel", "-u", user or getpass.getuser(), f"--name={name}")
    return ids


def _run(argv: list[str]) -> int:
    """``run -- CMD...``: run CMD, then print its usage line; exit with its status."""
    cmd = argv[1:] if argv and argv[0] == "--" else argv
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    rank = os.environ.get("SLURM_PROCID", "0")
    # ru_maxrss is in KiB on Linux
    print(
        f"usage rank={rank} cpu_s={ru.ru_utime + ru.ru_stime:.3f} "
        f"maxrss_mb={ru.ru_maxrss / 1024:.1f} wall_s={wall:.3f}",
        flush=True,
    )
    return os.waitstatus_to_exitcode(status) & 0xFF


def _work(cpu_s: float, mb: int) -> None:
    """Hold ``mb`` MB (every page touched) and compute until ``cpu_s`` CPU seconds are used."""
    block = bytearray(mb * 2**20)
    block[:: resource.getpagesize()] = b"\1" * len(block[:: resource.getpagesize()])
    start = time.process_time()
    x = 0
    while time.process_time() - start < cpu_s:
        for i in range(10000):
            x += i * i
    del block


if __name__ == "__main__":
    if sys.argv[1:2] == ["run"]:
        sys.exit(_run(sys.argv[2:]))
    if sys.argv[1:2] == ["work"]:
        _work(float(sys.argv[2]), int(sys.argv[3]))
        sys.exit(0)
    sys.exit("usage: python -m hpclab.cluster.efficiency run -- CMD... | work CPU_S MB")
