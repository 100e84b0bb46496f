"""Chapter 07's job API when a node dies under a job: slurmd killed after the job wrote its
result. The local cluster declares the node dead after SlurmdTimeout (5 s here, 300 s by
default), Slurm requeues the job (or ends it NODE_FAIL), and the result it wrote is kept, not
discarded nor computed again. Scratch
directories are private to each cluster and user. A rank killed in a 2 x 2 torchrun job is
blamed by number and signal, within seconds (the job is stopped at torchrun's first report).
About 40 s on 2 busy cores."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import psutil

from hpclab.cluster import local
from hpclab.cluster.runner import new_workdir, submit
from hpclab.cluster.spec import JobSpec


def _steps_of(job_id: str) -> list[psutil.Process]:
    """The job's slurmstepd and what runs under it (left running if slurmd is gone)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if cmd.startswith(f"slurmstepd: [{job_id}."):
            out += [p, *p.children(recursive=True)]
    return out


def test_ddp_multinode_blames_the_rank_that_was_killed(cluster):
    """Rank 3 of a 2 x 2 torchrun job killed mid-training: the error names rank 3 and SIGKILL,
    not rank 0 (whose launcher reports last, about a lost rendezvous)."""
    import threading
    from dataclasses import replace

    from hpclab.cluster.multinode import MultinodeConfig, run_layout, train_spec
    from hpclab.dist.failures import RankError
    from hpclab.progress import Progress

    site = local.site_profile(cluster)
    spec = replace(train_spec(MultinodeConfig.create()), steps=100_000)  # runs until killed
    box: dict = {}

    def run() -> None:
        try:
            box["out"] = run_layout(cluster, site, spec, 2, 2, Progress())
        except Exception as exc:  # noqa: BLE001 - the test inspects it
            box["err"] = exc

    def rank(p: psutil.Process) -> str | None:
        try:
            if "hpclab.cluster.multinode" in " ".join(p.cmdline()):
                return p.environ().get("RANK")
        except psutil.Error:
            pass
        return None

    thread = threading.Thread(target=run)
    thread.start()
    killed = None
    deadline = time.monotonic() + 120
    while thread.is_alive() and killed is None and time.monotonic() < deadline:
        ranks: dict = {}
        for p in sorted(psutil.process_iter(), key=lambda p: p.pid):
            ranks.setdefault(rank(p), p)  # the rank itself, not a process it forked
        if {"0", "1", "2", "3"} <= set(ranks):
            time.sleep(2.0)  # all four in the process group and training
            ranks["3"].kill()
            killed = ranks["3"].pid
        time.sleep(0.2)
    # the other node's launcher gives up on its rendezvous: seconds, or a minute under load
    thread.join(timeout=280)
    assert killed, "rank 3 never started"
    err = box.get("err")
    assert isinstance(err, RankError), box
    assert str(err).splitlines()[0] == "rank 3 of 4 was killed by SIGKILL (signal 9)"
    assert err.rank == 3
    assert not [p for p in psutil.process_iter() if rank(p) is not None]  # no rank left


def test_a_node_lost_after_the_job_wrote_its_result_keeps_it(cluster):
    site = local.site_profile(cluster)
    work = new_workdir("nodefail")
    out = work / "result.txt"
    lines = ['echo "scratch $SLURM_TMPDIR"', f"echo 42 > {out}.tmp && mv {out}.tmp {out}",
             "sleep 97.5"]  # fmt: skip
    job = submit(cluster, site, JobSpec(name="nodefail", time="00:03:00", mem="64M"), lines,
                 workdir=work)  # fmt: skip
    node, slurmd = "", 0
    try:
        deadline = time.monotonic() + 60
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert out.exists(), job.log()
        node = job.state().nodes
        root = Path(local.local_conf()).parents[1]
        slurmd = int((root / "run" / f"slurmd-{node}.pid").read_text())
        os.kill(slurmd, 9)
        t0 = time.monotonic()
        st = job.result(timeout_s=60, output=out)  # the finished work is kept, not run again
        print(f"node loss seen {time.monotonic() - t0:.1f} s after slurmd was killed: {st}")
        assert st.restarts >= 1 or st.state == "NODE_FAIL", st
        assert out.read_text() == "42\n"
        assert job.wait(timeout_s=30).done  # the requeued rerun was cancelled
        scratch = next(ln.split()[1] for ln in job.log().splitlines() if ln.startswith("scratch "))
        assert scratch == f"{root}/scratch/{os.getuid()}/{job.job_id}"  # this cluster, this user
    finally:
        if node:  # the node comes back (ReturnToService=2); the orphaned step is ended
            for p in _steps_of(job.job_id):
                p.kill()
            subprocess.run(["slurmd", "-N", node, "-f", str(local.local_conf())], check=True)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if "idle" in cluster.run("sinfo", "-h", "-n", node, "-o", "%T"):
                    break
                time.sleep(0.5)

    def alive(p: psutil.Process) -> bool:
        try:
            return p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    assert not [p for p in _steps_of(job.job_id) if alive(p)]
    sleepers = psutil.process_iter(["name", "cmdline"])
    assert not [p for p in sleepers if "97.5" in (p.info["cmdline"] or []) and alive(p)]
