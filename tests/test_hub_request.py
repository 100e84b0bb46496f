"""The hub's spawn form and the doctor's view of a Slurm job (chapter 07), without a cluster."""

from __future__ import annotations

import pytest

from hpclab.config import ConfigError
from hpclab.hub.request import SiteLimits, form_html, parse_form
from hpclab.measure.allocation import (
    format_duration,
    is_loopback,
    parse_time_left,
    server_bind_host,
    slurm_allocation,
)

SITE = SiteLimits(
    max_cores=8, max_mem_gb=32, max_gpus=2, max_minutes=120, partitions=("cpu", "gpu")
)


def form(**values: str) -> dict[str, list[str]]:
    return {k: [v] for k, v in values.items()}


def test_a_valid_form_becomes_the_batch_script_values():
    req = parse_form(form(cores="4", mem_gb="8", gpus="1", minutes="90", partition="gpu"), SITE)
    assert req.batch_options() == {
        "nprocs": "4",
        "memory": "8G",
        "runtime": "01:30:00",
        "gres": "gpu:1",
        "partition": "gpu",
    }


def test_empty_fields_take_the_site_defaults():
    site = SiteLimits(default_cores=2, default_mem_gb=4, default_minutes=45)
    opts = parse_form(form(cores="", mem_gb=""), site).batch_options()
    assert (opts["nprocs"], opts["memory"], opts["runtime"], opts["gres"]) == (
        "2",
        "4G",
        "00:45:00",
        "",
    )


@pytest.mark.parametrize(
    "values, names",
    [
        ({"cores": "9"}, ["cores=9", "1..8"]),
        ({"cores": "0"}, ["cores=0", "1..8"]),
        ({"mem_gb": "64"}, ["memory (GB)=64", "1..32"]),
        ({"minutes": "121"}, ["minutes=121", "1..120"]),
        ({"gpus": "3"}, ["gpus=3", "0..2"]),
        ({"cores": "two"}, ["cores='two'", "whole number"]),
        ({"partition": "bigmem"}, ["partition='bigmem'", "cpu, gpu"]),
    ],
)
def test_bad_values_are_refused_in_one_line_naming_the_field_and_the_range(values, names):
    with pytest.raises(ConfigError) as err:
        parse_form(form(**values), SITE)
    text = str(err.value)
    assert "\n" not in text
    for name in names:
        assert name in text


def test_no_gpus_offered_means_gpus_are_refused_and_not_in_the_form():
    site = SiteLimits()
    with pytest.raises(ConfigError, match="no GPUs"):
        parse_form(form(gpus="1"), site)
    assert 'name="gpus"' not in form_html(site)
    assert 'name="gpus"' in form_html(SITE) and '<option value="gpu">' in form_html(SITE)


def test_partition_names_cannot_inject_options():
    with pytest.raises(ConfigError, match="letters, digits"):
        parse_form(form(partition="cpu --uid=0"), SiteLimits())


def test_slurm_time_left_parses_every_squeue_form():
    assert parse_time_left("1-02:03:04") == 93784
    assert parse_time_left("02:03:04") == 7384
    assert parse_time_left("05:00") == 300
    assert parse_time_left("42") == 42
    assert parse_time_left("UNLIMITED") is None
    assert parse_time_left("NOT_SET") is None
    assert format_duration(5400) == "1 h 30 min" and format_duration(59) == "59 s"


def test_allocation_from_slurm_variables():
    env = {
        "SLURM_JOB_ID": "123",
        "SLURM_CPUS_PER_TASK": "2",
        "SLURM_MEM_PER_NODE": "4096",
        "SLURM_GPUS_ON_NODE": "1",
        "SLURM_JOB_PARTITION": "gpu",
        "SLURMD_NODENAME": "node7",
    }
    job = slurm_allocation(env)
    assert (job.job_id, job.cpus, job.mem_gb, job.gpus, job.partition, job.node) == (
        "123",
        2,
        4.0,
        1,
        "gpu",
        "node7",
    )
    assert slurm_allocation({}) is None
    per_cpu = slurm_allocation(
        {"SLURM_JOB_ID": "5", "SLURM_CPUS_ON_NODE": "4", "SLURM_MEM_PER_CPU": "512"}
    )
    assert (per_cpu.cpus, per_cpu.mem_gb) == (4, 2.0)


def test_server_exposure():
    assert server_bind_host({"JUPYTERHUB_SERVICE_URL": "http://127.0.0.1:0/user/a/"}) == "127.0.0.1"
    assert server_bind_host({}) is None
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")


def _doctor(monkeypatch, env: dict[str, str], affinity: int):
    from hpclab import doctor

    for k in (
        "SLURM_JOB_ID",
        "SLURM_CPUS_PER_TASK",
        "SLURM_JOB_END_TIME",
        "JUPYTERHUB_SERVICE_URL",
    ):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    info = {"cores_usable_sources": {"affinity": affinity}}
    return doctor._slurm_job(info), doctor._server_bind(info)


def test_doctor_names_the_job_and_warns_when_it_sees_more_cores_than_it_was_given(monkeypatch):
    import time

    end = str(int(time.time()) + 3600)
    job = {"SLURM_JOB_ID": "77", "SLURM_CPUS_PER_TASK": "1", "SLURM_JOB_END_TIME": end}
    ok, _ = _doctor(monkeypatch, job, affinity=1)
    assert ok.level == "ok" and "job 77" in ok.message and "1 core," in ok.message
    assert "59 min left" in ok.message or "1 h 0 min left" in ok.message
    loose, _ = _doctor(monkeypatch, job, affinity=2)  # TaskPlugin=task/none
    assert loose.level == "warn" and "2 cores" in loose.message and "task/none" in loose.message
    soon = dict(job, SLURM_JOB_END_TIME=str(int(time.time()) + 120))
    late, _ = _doctor(monkeypatch, soon, affinity=1)
    assert late.level == "warn" and "save your work" in late.message


def test_doctor_warns_when_the_server_listens_beyond_loopback(monkeypatch):
    _, local = _doctor(monkeypatch, {"JUPYTERHUB_SERVICE_URL": "http://127.0.0.1:0/u/"}, 1)
    _, wide = _doctor(monkeypatch, {"JUPYTERHUB_SERVICE_URL": "http://0.0.0.0:0/u/"}, 1)
    _, none = _doctor(monkeypatch, {}, 1)
    assert (local.level, wide.level, none.level) == ("ok", "warn", "ok")
    assert "0.0.0.0" in wide.message
