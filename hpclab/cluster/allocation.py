"""The allocation this process runs in, as Slurm describes it (chapter 07; shown by ``hpclab doctor``).

Inside a job (a JupyterHub server started by Slurm, or a batch script) Slurm sets ``SLURM_JOB_ID``,
``SLURM_JOB_NUM_NODES``, ``SLURM_CPUS_ON_NODE``, ``SLURM_GPUS_ON_NODE`` and others; the time left
comes from ``squeue -o %L``. Outside a job there is no allocation: the whole machine is yours
(or shared with whoever else logged in).
"""

from __future__ import annotations

import os
import subprocess

from hpclab.cluster import profiles


def time_left(job_id: str) -> str:
    """``squeue``'s time left of ``job_id`` (D-HH:MM:SS), or '' when it cannot say."""
    try:
        out = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%L"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def describe(environ: dict[str, str] | None = None, ask_squeue: bool = True) -> dict[str, str]:
    """Site and allocation: {"site", "job_id", "nodes", "cpus", "gpus", "time_left"} ('' = unknown)."""
    env = os.environ if environ is None else environ
    job = env.get("SLURM_JOB_ID", "")
    return {
        "site": profiles.detect(dict(env)) or "",
        "job_id": job,
        "nodes": env.get("SLURM_JOB_NUM_NODES", env.get("SLURM_NNODES", "")),
        "cpus": env.get("SLURM_CPUS_PER_TASK", env.get("SLURM_CPUS_ON_NODE", "")),
        "gpus": env.get("SLURM_GPUS_ON_NODE", ""),
        "time_left": time_left(job) if job and ask_squeue else "",
    }


def summary(environ: dict[str, str] | None = None, ask_squeue: bool = True) -> str:
    """One line for the doctor."""
    a = describe(environ, ask_squeue)
    site = f"site {a['site']}" if a["site"] else "no known site profile"
    if not a["job_id"]:
        return f"{site}; not inside a Slurm job"
    parts = [f"job {a['job_id']}"]
    parts += [f"{a[k]} {k}" for k in ("nodes", "cpus", "gpus") if a[k]]
    if a["time_left"]:
        parts.append(f"{a['time_left']} left")
    return f"{site}; " + ", ".join(parts)
