"""Shared fixtures: an isolated results store and a check that no test leaves a process behind."""

from __future__ import annotations

import os

import psutil
import pytest


@pytest.fixture(autouse=True)
def _isolated_results(tmp_path, monkeypatch):
    monkeypatch.setenv("HPCLAB_RESULTS", str(tmp_path / "results.sqlite"))


@pytest.fixture
def no_orphans():
    """Fails the test if it leaves child processes of this pytest process alive. A process
    started meanwhile by one that was there before (e.g. a renderer of the session's browser,
    kept by an earlier browser test in this worker) is not the test's."""
    me = psutil.Process(os.getpid())
    before = {p.pid for p in me.children(recursive=True)}

    def the_tests(p: psutil.Process) -> bool:
        try:
            return p.pid not in before and not any(a.pid in before for a in p.parents())
        except psutil.NoSuchProcess:
            return False

    yield
    gone, alive = psutil.wait_procs(
        [p for p in me.children(recursive=True) if the_tests(p)], timeout=3
    )
    assert not alive, f"processes left behind: {[(p.pid, p.name()) for p in alive]}"


@pytest.fixture(scope="session")
def preloaded():
    """The training engine's lazy imports done once in this process, so forked ranks do not
    each pay ~1-3 s (``pytestmark = pytest.mark.usefixtures("preloaded")`` in a module)."""
    from hpclab.train import preload

    preload()


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    """The local Slurm of ``scripts/local_slurm.sh`` (chapter 07): started for the session and
    stopped after it, or, when one is already up (``make slurm-up``), used and left up.

    Skips where it cannot run (not root, Debian's slurm/munge missing) unless
    ``HPCLAB_REQUIRE_SLURM=1`` (CI), where that is a failure.
    """
    import shutil

    from hpclab.cluster import local
    from hpclab.cluster.slurm import SlurmError

    mp = pytest.MonkeyPatch()
    mp.setenv("HPCLAB_JOBS_DIR", str(tmp_path_factory.mktemp("jobs")))
    was_up = local.local_running()
    why = None
    if not was_up and os.geteuid() != 0:
        why = "no local Slurm is up and starting one needs root (make SLURM_SUDO=sudo slurm-up)"
    elif not all(shutil.which(b) for b in ("slurmctld", "slurmd", "sbatch", "munged")):
        why = "Debian's slurmctld slurmd slurm-client munge are not installed"
    if why:
        mp.undo()
        if os.environ.get("HPCLAB_REQUIRE_SLURM") == "1":
            pytest.fail(why)
        pytest.skip(why)
    try:
        cluster = local.up()  # idempotent: connects to one that is already up
    except SlurmError as exc:
        mp.undo()
        pytest.fail(str(exc))
    _daemons_on_loopback_only(local.local_dir() / "run")
    try:
        yield cluster
    finally:
        if not was_up:
            local.down()
        mp.undo()


def _daemons_on_loopback_only(run_dir) -> None:
    """The local cluster's munged, slurmctld and slurmd listen on 127.0.0.1 only."""
    from listening import assert_loopback_only

    pids = [int(p.read_text().strip()) for p in run_dir.glob("*.pid")]
    # (a cluster left up by an older scripts/local_slurm.sh binds 0.0.0.0: restart it)
    found = assert_loopback_only(pids, "the local Slurm (restart it if it is older)", tree=False)
    names = {name for _, name, _, _ in found}
    assert {"slurmctld", "slurmd"} <= names, f"the local Slurm's daemons listen on: {found}"


@pytest.fixture
def cluster(slurm):
    """The session's local Slurm; the test must leave no job of its own in the queue."""
    import time

    from hpclab.cluster.runner import jobs_dir

    # Only this pytest process's jobs: they run in its own jobs directory (the ``slurm``
    # fixture gives each process one); another xdist worker's jobs are not this test's.
    mine = str(jobs_dir())
    before = {q["job_id"] for q in slurm.queue()}

    def left() -> list[dict]:
        where = dict(
            ln.split("|", 1) for ln in slurm.run("squeue", "-h", "-o", "%i|%Z").splitlines() if ln
        )
        return [
            q for q in slurm.queue()
            if q["job_id"] not in before and where.get(q["job_id"], "").startswith(mine)
        ]  # fmt: skip

    yield slurm
    deadline = time.monotonic() + 15
    while left() and time.monotonic() < deadline:
        time.sleep(0.2)
    remaining = left()
    for job in remaining:  # an array's pending tasks show as 12_[1-2%1]: cancel the array
        slurm.cancel(job["job_id"].split("_")[0])
    assert not remaining, f"jobs left in the queue: {remaining}"


@pytest.fixture
def small_crossover():
    """Chapter 01's crossover experiment, small, on the CPU beside the labelled GPU model."""
    from hpclab import experiments

    return experiments.run(
        "crossover",
        device="cpu",
        compare_devices=False,
        matmul_sizes=(8, 64),
        add_sizes=(256, 65536),
        repeat=2,
        threads=1,
    )
