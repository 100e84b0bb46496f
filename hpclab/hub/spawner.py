"""batchspawner's ``SlurmSpawner`` for the workbook: each student's JupyterLab is a Slurm job
(chapter 07; configured in ``deploy/jupyterhub/jupyterhub_config.py``).

What it adds to batchspawner 1.3, each for a thing known to bite on real sites:

- **The form** (:mod:`hpclab.hub.request`): cores, memory, time, GPUs and partition within the
  site's limits; a bad value is refused above the form in one line.
- **The environment.** The job runs ``batchspawner-singleuser jupyterhub-singleuser`` from the
  workbook's environment (``env_prefix``), so the kernel is that Python with hpclab. Slurm passes
  the job only what ``--export`` lists and batchspawner exports only the spawner's own
  environment, so ``PATH`` (the environment first) and ``SLURM_CONF`` are set here. Before
  submitting, the spawner checks that the *student* can execute that Python: a venv made under
  a 0700 home (``/root/...``) is invisible to everyone else and the job would die at once.
- **Bind address.** batchspawner resets ``ip`` to its trait's default in ``start()``, so a
  configured ``c.Spawner.ip`` is lost; ``server_ip`` is the address the job's server binds
  (``127.0.0.1`` when the hub runs on the host that runs the jobs, else the node's addresses),
  and ``state_exechost_exp`` where the proxy finds it.
- **No sudo.** Minimal images have none; as root, ``runuser -u USER --`` submits as the student.
- **Failures that say why.** ``sbatch``'s own message (e.g. "Requested node configuration is not
  available") reaches the spawn page; a job that dies at start is reported with its log's tail.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import urlparse, urlunparse

import batchspawner  # noqa: F401 - registers the /api/batchspawner route the job reports its port to
from batchspawner import JobStatus, SlurmSpawner
from jupyterhub.spawner import SpawnException
from traitlets import Dict, Integer, List, Unicode, default

from hpclab.config import ConfigError
from hpclab.hub.request import SiteLimits, form_html, parse_form

BATCH_SCRIPT = """#!/bin/bash
#SBATCH --job-name=jupyterhub-{{username}}
#SBATCH --output={{homedir}}/jupyterhub-%j.log
#SBATCH --chdir={{homedir}}
#SBATCH --export={{keepvars}}
#SBATCH --cpus-per-task={{nprocs}}
#SBATCH --mem={{memory}}
#SBATCH --time={{runtime}}
{% if partition %}#SBATCH --partition={{partition}}
{% endif %}{% if account %}#SBATCH --account={{account}}
{% endif %}{% if gres %}#SBATCH --gres={{gres}}
{% endif %}{% if options %}#SBATCH {{options}}
{% endif %}
set -euo pipefail
{{prologue}}
{% if srun %}{{srun}} {% endif %}{{cmd}}
{{epilogue}}
"""


# Pending reasons that no amount of waiting cures (Slurm's squeue(1) "JOB REASON CODES").
HOPELESS = {
    "PartitionTimeLimit": "the time asked is above the partition's limit",
    "PartitionNodeLimit": "more nodes or cores than the partition allows",
    "PartitionConfig": "the request exceeds what the partition allows (time, cores or memory)",
    "BadConstraints": "no node has the features or resources asked",
    "InvalidAccount": "the account does not exist or is not yours",
    "InvalidQOS": "the QOS does not exist or is not yours",
    "AccountNotAllowed": "the partition does not accept this account",
}


def reason_is_hopeless(reason: str) -> bool:
    return reason in HOPELESS or (reason.startswith("QOSMax") and "PerJob" in reason)


def _executable_by(user: str, path: str) -> str | None:
    """None if ``user`` can execute ``path`` (every parent searchable), else the first blocker."""
    pw = pwd.getpwnam(user)
    groups = set(os.getgrouplist(user, pw.pw_gid))
    target = Path(path).resolve()
    for p in [*reversed(target.parents), target]:
        st = p.stat()
        if st.st_uid == pw.pw_uid:
            bit = 0o100
        elif st.st_gid in groups:
            bit = 0o010
        else:
            bit = 0o001
        if not st.st_mode & bit:
            return str(p)
    return None


class HpclabSlurmSpawner(SlurmSpawner):
    """SlurmSpawner + the workbook's form, environment, bind address and error reports."""

    # batchspawner's start() resets self.ip to the trait's default, so c.Spawner.ip is lost:
    # the job's bind address is this trait, written into JUPYTERHUB_SERVICE_URL by get_env().
    server_ip = Unicode(
        "0.0.0.0", help="address the single-user server binds to inside the job"
    ).tag(config=True)

    env_prefix = Unicode(
        help="the workbook's environment (a venv or conda prefix with hpclab and jupyterhub)"
    ).tag(config=True)
    slurm_conf = Unicode(
        os.environ.get("SLURM_CONF", ""), help="SLURM_CONF for sbatch/squeue and the job"
    ).tag(config=True)
    site_limits = Dict(help="SiteLimits fields: max_cores, max_mem_gb, max_gpus, ...").tag(
        config=True
    )
    log_tail_lines = Integer(20, help="job log lines shown when a job dies at start").tag(
        config=True
    )
    extra_path = List(Unicode(), help="directories after the environment's bin on PATH").tag(
        config=True
    )

    @default("env_prefix")
    def _default_env_prefix(self) -> str:
        import sys

        return sys.prefix

    @default("exec_prefix")
    def _default_exec_prefix(self) -> str:
        # Minimal images have no sudo; root can become the student with util-linux's runuser.
        # Absolute paths: commands run with the job's PATH (get_env), which has no sbin.
        sudo = shutil.which("sudo")
        if sudo:
            return f"{sudo} -E -u {{username}}"
        return f"{shutil.which('runuser') or '/usr/sbin/runuser'} -u {{username}} --"

    @default("batch_script")
    def _default_batch_script(self) -> str:
        return BATCH_SCRIPT

    @default("req_srun")
    def _default_srun(self) -> str:
        # A job step (it inherits SLURM_CPUS_PER_TASK): scancel stops the server cleanly.
        return "srun"

    @default("batch_query_cmd")
    def _default_query(self) -> str:
        # State, why it waits (%r) and the node (%B): the reason reaches the spawn page.
        return "squeue -h -j {job_id} -o '%T|%r|%B'"

    @default("state_exechost_re")
    def _default_exechost_re(self) -> str:
        return r"\|([^|\s]+)$"

    def pending_reason(self) -> str:
        """Slurm's reason a pending job waits (``Resources``, ``PartitionTimeLimit``...)."""
        parts = (self.job_status or "").split("|")
        return parts[1] if len(parts) == 3 else ""

    async def query_job_status(self) -> JobStatus:
        status = await super().query_job_status()
        reason = self.pending_reason()
        if status == JobStatus.PENDING and reason_is_hopeless(reason):
            job = self.job_id
            await self.cancel_batch_job()
            self.clear_state()
            raise SpawnException(
                f"Slurm will never start job {job} as asked ({reason}): "
                f"{HOPELESS.get(reason, 'ask for less')}",
                reason="slurm",
                status_code=400,
            )
        return status

    async def progress(self) -> Any:
        while True:
            if self.state_ispending():
                yield {"message": f"Pending in Slurm's queue ({self.pending_reason() or '...'})"}
            elif self.state_isrunning():
                yield {"message": "Slurm job running; waiting for JupyterLab to answer"}
                return
            else:
                yield {"message": "Submitting the Slurm job"}
            await asyncio.sleep(1)

    def limits(self) -> SiteLimits:
        return SiteLimits(**self.site_limits)

    def _options_form_default(self) -> str:
        return form_html(self.limits())

    def options_from_form(self, formdata: dict[str, list[str]]) -> dict[str, str]:
        # ConfigError's one line is shown above the form (JupyterHub re-renders it with the text).
        try:
            return parse_form(formdata, self.limits()).batch_options()
        except ConfigError as exc:
            raise ValueError(str(exc)) from None

    def get_env(self) -> dict[str, str]:
        env = super().get_env()
        url = urlparse(env["JUPYTERHUB_SERVICE_URL"])
        env["JUPYTERHUB_SERVICE_URL"] = urlunparse(
            url._replace(netloc=f"{self.server_ip}:{url.port or 0}")
        )
        path = [
            str(Path(self.env_prefix) / "bin"),
            *self.extra_path,
            "/usr/local/bin",
            "/usr/bin",
            "/bin",
        ]
        env["PATH"] = os.pathsep.join(path)
        if self.slurm_conf:
            env["SLURM_CONF"] = self.slurm_conf
        # sbatch --export passes only the listed variables: the student's own HOME and USER too.
        home = pwd.getpwnam(self.user.name).pw_dir
        env.update(HOME=home, USER=self.user.name, LOGNAME=self.user.name)
        # One thread per granted core: libraries read OMP_NUM_THREADS, not the allocation. (Set
        # here, not in the script: srun passes the step only what --export listed.)
        cores = (self.user_options or {}).get("nprocs")
        if cores:
            env["OMP_NUM_THREADS"] = str(cores)
        return env

    def _log_path(self) -> Path:
        return Path(pwd.getpwnam(self.user.name).pw_dir) / f"jupyterhub-{self.job_id}.log"

    def _log_tail(self) -> str:
        try:
            lines = self._log_path().read_text(errors="replace").splitlines()
        except OSError as exc:
            return f"(no job log: {exc.strerror})"
        return "\n".join(lines[-self.log_tail_lines :]) or "(the job log is empty)"

    async def start(self) -> Any:
        python = str(Path(self.env_prefix) / "bin" / "python")
        blocker = _executable_by(self.user.name, python)
        if blocker:
            raise SpawnException(
                f"{self.user.name} cannot execute {python}: {blocker} is not searchable by that "
                "user. Install the workbook's environment in a shared path (or make it readable).",
                reason="environment",
                status_code=500,
            )
        try:
            return await super().start()
        except RuntimeError as exc:
            if self.job_id and "disappeared" in str(exc):
                raise SpawnException(
                    f"Slurm job {self.job_id} ended as it started; its log "
                    f"({self._log_path()}) ends with:\n{self._log_tail()}",
                    reason="job-died",
                    status_code=500,
                ) from None
            # sbatch's own words, e.g. "Requested node configuration is not available".
            raise SpawnException(
                f"Slurm refused the job: {exc}", reason="slurm", status_code=400
            ) from None
