"""Finding a Slurm to talk to, and the project's local one (chapter 07).

:func:`connect` looks, in order, for the Slurm of ``$SLURM_CONF``, the local cluster started by
``scripts/local_slurm.sh`` (``hpclab cluster up``), and a site's Slurm configured the usual way
(``sinfo`` answers with no ``SLURM_CONF``). It returns a :class:`Cluster`, or None with a
one-sentence reason from :func:`why_not`, so a notebook can say plainly that there is no Slurm
and show the generated scripts and the reference results instead.

:func:`up`, :func:`down` and :func:`env` run the project's script, the same one the tests'
fixture and ``make slurm-up`` use; :func:`connected` is "the Slurm here, or the local one for
the block" (the benchmarks').
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from hpclab.cluster import profiles
from hpclab.cluster.slurm import Cluster, SlurmError

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "local_slurm.sh"


def local_dir() -> Path:
    return Path(os.environ.get("HPCLAB_SLURM_DIR", "/tmp/hpclab-slurm"))


def local_conf() -> Path:
    return local_dir() / "etc" / "slurm.conf"


def local_running() -> bool:
    """The local controller's process is alive (asking a stopped one makes scontrol wait ~10 s)."""
    try:
        pid = int((local_dir() / "run" / "slurmctld.pid").read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    return True


def _answers(cluster: Cluster) -> bool:
    try:
        return "UP" in cluster.run("scontrol", "ping")
    except SlurmError:
        return False


def _site_of(cluster: Cluster) -> str:
    try:
        conf = cluster.run("scontrol", "show", "config")
    except SlurmError:
        conf = ""
    if "ClusterName" in conf and "= hpclab" in conf.split("ClusterName", 1)[1].splitlines()[0]:
        return "local"
    return profiles.detect() or "generic"


def connect() -> Cluster | None:
    """A Slurm that answers here, or None (then :func:`why_not` says why in one sentence)."""
    if shutil.which("sbatch") is None:
        return None
    candidates = []
    if os.environ.get("SLURM_CONF"):
        candidates.append(os.environ["SLURM_CONF"])
    if local_conf().is_file():
        candidates.append(str(local_conf()))
    candidates.append(None)  # the site's own configuration
    for conf in candidates:
        if conf == str(local_conf()) and not local_running():
            continue
        cluster = Cluster(conf=conf, timeout_s=10.0)
        if _answers(cluster):
            cluster.site = _site_of(cluster)
            cluster.local = cluster.site == "local"
            cluster.timeout_s = 30.0
            return cluster
    return None


def why_not() -> str:
    """One sentence: why :func:`connect` found no Slurm."""
    if shutil.which("sbatch") is None:
        return (
            "There is no Slurm here (no sbatch command: install Slurm, e.g. apt-get install "
            "slurmctld slurmd slurm-client munge, or `module load slurm` on a cluster), so the "
            "chapter shows its job scripts and recorded runs; `hpclab cluster up` starts a local "
            "one (as root)."
        )
    return (
        "Slurm's commands are installed but no controller answers, so the chapter shows its "
        "job scripts and recorded runs; `hpclab cluster up` starts a local one (as root)."
    )


def site_profile(cluster: Cluster | None) -> profiles.SiteProfile:
    """The cluster's site profile, with its live partitions when it answers."""
    name = cluster.site if cluster else (profiles.detect() or "local")
    prof = profiles.load(name)
    if cluster is None:
        return prof
    try:
        text = cluster.run("sinfo", "-h", "-o", "%P|%l|%D|%c|%m|%G")
    except SlurmError:
        return prof
    return profiles.with_live_partitions(prof, text)


def _script(action: str, nodes: int | None = None) -> subprocess.CompletedProcess:
    if not SCRIPT.is_file():
        raise SlurmError(f"{SCRIPT} is missing: the local cluster runs from a checkout of hpclab")
    env = dict(os.environ)
    if nodes:
        env["HPCLAB_SLURM_NODES"] = str(nodes)
    return subprocess.run(
        ["bash", str(SCRIPT), action], env=env, capture_output=True, text=True, timeout=120
    )


def up(nodes: int = 2) -> Cluster:
    """Start the local cluster (idempotent) and connect to it."""
    proc = _script("start", nodes)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines()
        raise SlurmError(f"local Slurm did not start: {lines[-1] if lines else proc.returncode}")
    return Cluster(conf=str(local_conf()), site="local", local=True)


def down() -> str:
    """Stop the local cluster: its jobs are cancelled, its daemons stopped."""
    proc = _script("stop")
    return (proc.stderr or proc.stdout).strip()


class NoSlurm(SlurmError):
    """No Slurm answers here and the local one did not start."""


@contextmanager
def connected(nodes: int = 2) -> Iterator[Cluster]:
    """The Slurm :func:`connect` finds, else the local one started for the block and stopped
    after it. Raises :class:`NoSlurm` (only) when there is none and the local one does not start.
    """
    cluster = connect()
    started = cluster is None
    if started:
        try:
            cluster = up(nodes)
        except (SlurmError, OSError, subprocess.SubprocessError) as err:
            raise NoSlurm(str(err)) from err
    try:
        yield cluster
    finally:
        if started:
            down()


def env() -> str:
    return _script("env").stdout
