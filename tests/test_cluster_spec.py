"""Chapter 07 without a scheduler: JobSpec validation, site profiles, job scripts."""

from __future__ import annotations

import pytest

from hpclab.cluster import profiles
from hpclab.cluster.script import parse_header, render
from hpclab.cluster.spec import JobSpec, array_indices, mem_mb, time_seconds
from hpclab.config import ConfigError


@pytest.mark.parametrize(
    "text, seconds",
    [("30", 1800), ("5:30", 330), ("01:02:03", 3723), ("1-00", 86400), ("2-01:30:00", 178200)],
)
def test_slurm_time_formats(text, seconds):
    assert time_seconds(text) == seconds


def test_memory_and_array_parsing():
    assert mem_mb("4G") == 4096 and mem_mb("512") == 512 and mem_mb("1T") == 1024 * 1024
    assert array_indices("0-15%4") == list(range(16))
    assert array_indices("1,3,5-9:2") == [1, 3, 5, 7, 9]


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"time": "ten minutes"}, ["time=", "HH:MM:SS"]),
        ({"time": "0:30"}, ["under a minute"]),
        ({"mem": "4GB"}, ["mem=", "K, M, G or T"]),
        ({"nodes": 0}, ["nodes=0", "1..100000"]),
        ({"array": "0-15%"}, ["array=", "0-15%4"]),
        ({"signal": "USR3@60"}, ["signal=", "USR2"]),
        ({"signal": "B:USR2@600", "time": "5"}, ["600 s before", "300 s"]),
    ],
)
def test_bad_spec_is_refused_in_one_line(kwargs, words):
    with pytest.raises(ConfigError) as err:
        JobSpec(**kwargs)
    msg = str(err.value)
    assert "\n" not in msg and all(w in msg for w in words), msg


def test_site_limits_are_checked_before_submission():
    nersc = profiles.load("perlmutter")
    ok = JobSpec(nodes=2, gpus_per_node=4, cpus_per_task=16, ntasks_per_node=4, account="m1234_g")
    assert ok.check_site(nersc) is ok
    # NERSC's own layout: 4 tasks x -c 32 = the node's 128 hardware threads (Slurm's CPUs there)
    full = JobSpec(nodes=2, gpus_per_node=4, cpus_per_task=32, ntasks_per_node=4, account="m1234_g")
    assert full.check_site(nersc) is full
    cases = [
        (JobSpec(gpus_per_node=8, account="m1234_g"), "gpus_per_node=8 exceeds"),
        (JobSpec(time="3-00:00:00", account="m1234_g"), "allowed: <= 2-00:00:00"),
        (JobSpec(partition="gpu", account="m1234_g"), "allowed: debug, regular"),
        (JobSpec(), "account is required"),
        (JobSpec(account="def-smith"), "e.g. m1234_g"),
        (JobSpec(ntasks_per_node=4, cpus_per_task=64, account="m1234_g"), "product <= 128"),
    ]
    for spec, words in cases:
        with pytest.raises(ConfigError, match=words.replace("(", r"\(")):
            spec.check_site(nersc)


def test_every_bundled_profile_loads_with_source_and_date():
    assert {"local", "generic", "alliance", "perlmutter", "graham_2019"} <= set(profiles.names())
    for name in profiles.names():
        p = profiles.load(name)
        assert p.source and p.checked and p.default_partition in p.partitions
    assert profiles.load("graham_2019").partition(None).gpus_per_node == 2
    with pytest.raises(ConfigError, match="known: alliance"):
        profiles.load("graham")


def test_site_detection_from_the_environment():
    assert profiles.detect({"CC_CLUSTER": "narval"}) == "alliance"
    assert profiles.detect({"NERSC_HOST": "perlmutter"}) == "perlmutter"
    assert profiles.detect({"SLURM_CLUSTER_NAME": "hpclab"}) == "local"
    assert profiles.detect({}) is None


def test_live_partitions_replace_the_profile_ones():
    text = "gpu*|1-00:00:00|4|32|257000|gpu:a100:4\ncpu|infinite|10|64|515000|(null)\n"
    p = profiles.with_live_partitions(profiles.load("generic"), text)
    assert p.default_partition == "gpu"
    assert p.partitions["gpu"].gpus_per_node == 4 and p.partitions["cpu"].gpus_per_node == 0
    assert p.partitions["cpu"].max_time == "365-00:00:00"


def test_rendered_script_reads_back_as_the_spec():
    spec = JobSpec(
        name="train",
        nodes=2,
        ntasks_per_node=2,
        cpus_per_task=8,
        gpus_per_node=2,
        time="00:30:00",
        mem="16G",
        account="def-smith",
        signal="B:USR2@60",
        requeue=True,
    )
    text = render(spec, profiles.load("alliance"), ["srun python train.py"])
    head = parse_header(text)
    assert head["nodes"] == "2" and head["ntasks-per-node"] == "2" and head["cpus-per-task"] == "8"
    assert head["gpus-per-node"] == "2" and head["time"] == "00:30:00" and head["mem"] == "16G"
    assert head["account"] == "def-smith" and head["signal"] == "B:USR2@60" and "requeue" in head
    assert "module load" in text and text.rstrip().endswith("srun python train.py")
    graham = render(JobSpec(gpus_per_node=2, account="def-smith"), profiles.load("graham_2019"), [])
    assert parse_header(graham)["gres"] == "gpu:2"
    nersc = render(JobSpec(account="m1_g", partition="debug"), profiles.load("perlmutter"), [])
    assert parse_header(nersc)["constraint"] == "gpu" and parse_header(nersc)["qos"] == "debug"


def test_parse_header_reads_short_options_and_stops_at_the_first_command():
    text = "#!/bin/bash\n#SBATCH -N 2 -c 8\n#SBATCH -t 30 -A def-x\necho hi\n#SBATCH --mem=1G\n"
    assert parse_header(text) == {
        "nodes": "2",
        "cpus-per-task": "8",
        "time": "30",
        "account": "def-x",
    }


def test_doctor_names_site_job_and_resources(monkeypatch):
    from hpclab.doctor import _slurm_job

    for k in list(__import__("os").environ):
        if k.startswith("SLURM_") or k == "CC_CLUSTER":
            monkeypatch.delenv(k)
    env = {
        "CC_CLUSTER": "fir",
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NUM_NODES": "2",
        "SLURM_CPUS_PER_TASK": "8",
        "SLURM_GPUS_ON_NODE": "4",
        "SLURM_JOB_END_TIME": str(int(__import__("time").time()) + 7200),
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    check = _slurm_job({"cores_usable_sources": {"affinity": 8}})
    assert check.message.startswith("site alliance; job 42 on ?: 2 nodes, 8 cores, 4 GPUs")
    for k in env:
        monkeypatch.delenv(k)
    assert _slurm_job({}).message == "not inside a Slurm job"


def test_cli_cluster_env_prints_the_local_clusters_conf(tmp_path, monkeypatch):
    import subprocess
    import sys

    monkeypatch.setenv("HPCLAB_SLURM_DIR", str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-m", "hpclab.cli", "cluster", "env"], capture_output=True, text=True
    )
    assert out.returncode == 0
    assert f"export SLURM_CONF={tmp_path}/etc/slurm.conf" in out.stdout.splitlines()
    bad = subprocess.run(
        [sys.executable, "-m", "hpclab.cli", "cluster", "start"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "invalid choice: 'start'" in bad.stderr
