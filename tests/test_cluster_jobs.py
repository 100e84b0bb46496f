"""Chapter 07 against the real local Slurm: jobs, states, logs, cancel, arrays (needs root)."""

from __future__ import annotations

import time

import pytest

from hpclab.cluster import local
from hpclab.cluster.arrays import ArrayConfig, run_array
from hpclab.cluster.hello import HelloConfig, run_hello
from hpclab.cluster.runner import new_workdir, submit
from hpclab.cluster.slurm import SlurmError
from hpclab.cluster.spec import JobSpec
from hpclab.config import ConfigError
from hpclab.progress import Progress


def test_hello_on_two_nodes_sees_the_cores_it_asked_for(cluster):
    result = run_hello(HelloConfig(nodes=2, cpus_per_task=1), Progress())
    tasks = [r for r in result.records if r["kind"] == "task"]
    assert sorted(t["node"] for t in tasks) == ["node1", "node2"]
    # task/affinity binds the job to its one core although the node has more
    assert all(t["nproc"] == 1 for t in tasks)
    assert all(t["node_cores"] >= 2 for t in tasks)
    states = [r["state"] for r in result.records if r["kind"] == "state"]
    assert states[-1] == "COMPLETED"
    acct = [r for r in result.records if r["kind"] == "sacct"]
    assert acct and acct[0]["state"] == "COMPLETED" and acct[0]["exit_code"] == "0:0"
    two = run_hello(HelloConfig(nodes=1, cpus_per_task=2), Progress())
    assert [r["nproc"] for r in two.records if r["kind"] == "task"] == [2]


def test_a_failing_job_shows_its_exit_code_and_log_tail(cluster):
    site = local.site_profile(cluster)
    job = submit(cluster, site, JobSpec(name="fails"), ["echo about to fail", "exit 3"])
    with pytest.raises(SlurmError) as err:
        job.result(timeout_s=60)
    assert "FAILED with exit code 3:0" in str(err.value) and "about to fail" in str(err.value)


def test_pending_reason_cancel_and_the_queue(cluster):
    work = new_workdir("later")
    # --begin is a real scheduler reason (the same one a requeued job waits with)
    job = cluster.submit("#!/bin/bash\n#SBATCH --begin=now+600\n#SBATCH --time=1\ntrue\n", work)
    st = job.wait(until=("PENDING",), timeout_s=20)
    assert st.reason == "BeginTime"
    assert job.job_id in [q["job_id"] for q in cluster.queue()]
    job.cancel()
    assert job.wait(timeout_s=20).state == "CANCELLED"


def test_site_limits_refuse_before_sbatch_and_test_only_accepts_a_rendered_script(
    cluster, tmp_path
):
    site = local.site_profile(cluster)
    with pytest.raises(ConfigError, match="allowed: 1..2"):
        submit(cluster, site, JobSpec(nodes=3), ["true"])
    with pytest.raises(ConfigError, match="gpus_per_node=1 exceeds"):
        submit(cluster, site, JobSpec(gpus_per_node=1), ["true"])
    from hpclab.cluster.script import render

    text = render(JobSpec(nodes=2, time="5"), site, ["srun hostname"])
    assert "to start at" in cluster.test_only(text, tmp_path)
    with pytest.raises(SlurmError, match="refused"):
        cluster.test_only(text.replace("--nodes=2", "--nodes=5"), tmp_path)


def test_job_array_runs_every_trial_and_names_the_best(cluster):
    from hpclab.trial import run_trial

    cfg = ArrayConfig(trials=2, throttle=2, epochs=1, samples=200, serial=False)
    summary, *trials = run_array(cfg, Progress()).records
    assert [t["task"] for t in trials] == [0, 1]
    assert len({t["params"]["lr"] for t in trials}) == 2
    assert summary["best_val_acc"] == max(t["val_acc"] for t in trials)
    assert all(t["fate"] == "finished" and t["queue_s"] <= t["end_s"] for t in trials)
    # the same trial as chapter 08's search: the array task's loss is the one run here
    here = run_trial(trials[1]["params"], 1, 0, samples=200)
    assert abs(here["val_loss"] - trials[1]["val_loss"]) < 1e-6
    assert all(t["startup_s"] > 0 for t in trials)  # a fresh process pays its imports


def test_job_monitor_shows_states_and_log_and_cancels(cluster):
    from hpclab.widgets.job_monitor import job_monitor

    site = local.site_profile(cluster)
    job = submit(cluster, site, JobSpec(name="watched"), ["echo hello from the job", "sleep 120"])
    mon = job_monitor(job)
    job.wait(until=("RUNNING",), timeout_s=30)
    deadline = time.monotonic() + 20
    while "hello from the job" not in mon.log.value and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "hello from the job" in mon.log.value and "watched" in mon.queue.value
    mon.cancel_button.click()
    mon.wait(timeout_s=30)
    assert [s for _, s in mon.states][-1] == "CANCELLED" and "RUNNING" in mon.figure.data[0].y
    assert "CANCELLED" in mon.status.value and mon.cancel_button.disabled


def test_cancelling_the_wait_cancels_the_job(cluster):
    from hpclab.progress import Cancelled

    site = local.site_profile(cluster)
    job = submit(cluster, site, JobSpec(name="interrupted"), ["sleep 120"])
    progress = Progress()
    progress.cancel()  # the widget's Cancel, or Ctrl-C in the CLI (KeyboardInterrupt) alike
    with pytest.raises(Cancelled):
        job.wait(progress=progress)
    assert job.wait(timeout_s=20).state == "CANCELLED"


def test_staging_runs_as_a_job_step_into_the_jobs_scratch(cluster):
    from hpclab.cluster.staging_job import StagingJobConfig, run_staging_job

    result = run_staging_job(StagingJobConfig(files=50), Progress())
    live = [r for r in result.records if r["tier"] == "live"]
    assert sorted(r["method"] for r in live) == ["files", "lmdb", "tar"]
    job_id = live[0]["job_id"]
    # this cluster's own scratch, per user and job (scripts/local_slurm.sh's task prolog)
    import os

    from hpclab.cluster import local

    scratch = f"{local.local_conf().parents[1]}/scratch/{os.getuid()}/{job_id}"
    assert all(r["slurm_tmpdir"] == scratch for r in live)
    assert live[0]["node"] in ("node1", "node2")
    files = next(r for r in live if r["method"] == "files")
    assert files["opens"] >= 50  # one open per small file
