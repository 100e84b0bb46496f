"""Chapter 07's binding, efficiency, forgotten jobs and dependencies on the local Slurm."""

from __future__ import annotations

import json
import os

import pytest

from hpclab.cluster import local
from hpclab.cluster.binding import BIND_LINES, cpu_list, mask
from hpclab.cluster.efficiency import cancel_mine, mine, seff_of_requests
from hpclab.cluster.runner import new_workdir, python, submit
from hpclab.cluster.script import render
from hpclab.cluster.spec import JobSpec
from hpclab.config import ConfigError


def test_masks_lists_and_the_lines_every_job_script_carries():
    assert mask([0]) == "0x1" and mask([0, 2]) == "0x5" and mask(range(16)) == "0xffff"
    assert cpu_list([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8" and cpu_list([3]) == "3"
    script = render(JobSpec(cpus_per_task=4), local.site_profile(None), ["srun true"])
    for line in BIND_LINES:
        assert line in script
    # the binding comes before the work, after the site's setup
    assert script.index("SRUN_CPUS_PER_TASK") < script.index("srun true")


def test_dependency_is_validated_and_rendered():
    spec = JobSpec(dependency="afterok:12:13")
    assert "#SBATCH --dependency=afterok:12:13" in render(spec, local.site_profile(None), [])
    for bad in ("afterok", "afterok:x", "before:1", "afterok:1;rm"):
        with pytest.raises(ConfigError, match="dependency="):
            JobSpec(dependency=bad)


def test_gpu_sharing_says_mig_mps_or_whole_gpus(monkeypatch):
    from hpclab.cluster.gpu_sharing import H100_MIG, MODES, sharing
    from hpclab.doctor import _cuda_visible

    mig = {"CUDA_VISIBLE_DEVICES": "MIG-4f0e4d6c-6c5a-5b0e-9f4f-1a2b3c4d5e6f"}
    assert sharing(mig)["kind"] == "mig" and "MIG slice MIG-4f0e4d6c-6c5" in sharing(mig)["text"]
    mps = {"CUDA_VISIBLE_DEVICES": "0", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25"}
    assert sharing(mps)["kind"] == "mps" and "at most 25% of the SMs" in sharing(mps)["text"]
    assert sharing({"CUDA_VISIBLE_DEVICES": "0,1"})["kind"] == "whole"
    assert (
        sharing({})["kind"] == "none" and "empty" in sharing({"CUDA_VISIBLE_DEVICES": ""})["text"]
    )
    # MIG isolates memory, faults and bandwidth; MPS none of the three fully
    by_way = {m["way"].split(" ")[0]: m for m in MODES}
    assert (by_way["MIG"]["faults"], by_way["MIG"]["bandwidth"]) == ("yes", "yes")
    assert (by_way["MPS"]["faults"], by_way["MPS"]["bandwidth"]) == ("no", "no")
    # an H100's slices never add up to more than the GPU: 7 sevenths, 80 GB
    assert all(n * frac <= 1.0 + 1e-9 and n * gb <= 80 for _, n, frac, gb in H100_MIG)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", mig["CUDA_VISIBLE_DEVICES"])
    assert "MIG slice" in _cuda_visible({}).message


def _doctors(work, pattern):
    return sorted(
        (json.loads(p.read_text()) for p in work.glob(pattern)),
        key=lambda d: int(d["env"]["slurm"]["SLURM_PROCID"]),
    )


def test_each_rank_is_bound_as_doctor_reports_it_inside_the_job(cluster):
    site = local.site_profile(cluster)
    work = new_workdir("bind")
    doctor = f"{python()} -m hpclab.cli doctor --json"
    spec = JobSpec(name="bind", ntasks_per_node=2, cpus_per_task=1, mem="1G")
    cmds = [
        f"srun --output={work}/own-%t.json {doctor} || true",  # exit 1 = a failed check; fine
        # two ranks bound to one core (what an unbound node can do): the cheap check is enough
        f"srun --cpu-bind=map_cpu:0,0 --output={work}/same-%t.txt {python()} -c "
        "'import os; print(sorted(os.sched_getaffinity(0)))'",
        "echo threads=$OMP_NUM_THREADS srun_cpt=$SRUN_CPUS_PER_TASK",
    ]
    submit(cluster, site, spec, cmds, workdir=work).result(timeout_s=120)
    own = _doctors(work, "own-*.json")
    assert [d["env"]["slurm"]["SLURM_PROCID"] for d in own] == ["0", "1"]
    masks = [d["env"]["cpus_allowed"] for d in own]
    # the library's scripts bind each rank to its own core: one CPU each, never the same one
    assert all(len(m) == 1 for m in masks) and masks[0] != masks[1]
    msg = [c["message"] for c in own[0]["checks"] if c["name"] == "slurm_job"][0]
    assert f"rank 0 on CPUs {masks[0][0]} (mask {mask(masks[0])})" in msg
    same = [p.read_text().strip() for p in sorted(work.glob("same-*.txt"))]
    assert same == ["[0]", "[0]"]
    log = (work / next(p.name for p in work.glob("slurm-*.out"))).read_text()
    assert "threads=1 srun_cpt=1" in log


def test_seff_of_a_fitting_and_a_wasteful_request(cluster):
    site = local.site_profile(cluster)
    specs = [JobSpec(name="fits", mem="400M"), JobSpec(name="wasteful", cpus_per_task=2, mem="2G")]
    fits, waste = seff_of_requests(cluster, site, specs, 1.0, 150)  # both at once, two nodes
    for eff in (fits, waste):
        assert eff.cpu_s >= 1.0  # the work computes for 1 CPU second, measured by the kernel
        assert eff.maxrss_mb >= 150  # and holds 150 MB (every page touched)
        # Slurm's accounting (jobacct_gather, read by sstat) saw the same peak
        assert eff.sstat_maxrss_mb is not None and eff.sstat_maxrss_mb >= 150
    # one busy thread cannot use more than one core: on two cores at most half is used
    assert waste.cores == 2 and waste.cpu_efficiency <= 0.5 + 0.01
    assert fits.cores == 1 and fits.cpu_efficiency <= 1.01
    assert waste.mem_efficiency == pytest.approx(waste.maxrss_mb / 2048)
    assert fits.mem_efficiency == pytest.approx(fits.maxrss_mb / 400)
    assert "CPU Efficiency:" in waste.report() and "of 2048 MB" in waste.report()


def test_find_and_cancel_a_forgotten_job(cluster):
    site = local.site_profile(cluster)
    name = f"forgotten-{os.getpid()}"
    job = submit(cluster, site, JobSpec(name=name, time="10"), ["sleep 300"])
    job.wait(until=("RUNNING",), timeout_s=60)
    found = [j for j in mine(cluster) if j["name"] == name]
    assert [j["job_id"] for j in found] == [job.job_id]
    assert found[0]["state"] == "RUNNING" and found[0]["cpu_s"] == 0  # it only waits
    with pytest.raises(ValueError, match="name=''"):
        cancel_mine(cluster, "")
    assert cancel_mine(cluster, name) == [job.job_id]
    assert job.wait(timeout_s=30).state == "CANCELLED"
    assert cancel_mine(cluster, name) == []


def test_afterok_runs_after_success_and_never_after_failure(cluster):
    site = local.site_profile(cluster)
    work = new_workdir("dep")
    first = submit(cluster, site, JobSpec(name="first"), [f"sleep 1; echo made > {work}/made"])
    second = submit(
        cluster, site, JobSpec(name="second", dependency=first.after()), [f"cat {work}/made"]
    )
    assert second.result(timeout_s=60).state == "COMPLETED"
    assert "made" in second.log()
    fails = submit(cluster, site, JobSpec(name="fails"), ["exit 1"])
    never = submit(cluster, site, JobSpec(name="never", dependency=fails.after()), ["true"])
    st = never.wait(stop_when=lambda s: s.reason == "DependencyNeverSatisfied", timeout_s=60)
    assert st.state == "PENDING"
    never.cancel()
