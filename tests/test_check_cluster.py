"""Chapter 07 checks accept the solutions and reject plausible wrong answers with true hints."""

from __future__ import annotations

import os
import shutil
import tempfile

import torch

from hpclab.check import cluster as check
from hpclab.cluster.spec import JobSpec


def good_spec(**kw):
    base = dict(
        nodes=2,
        gpus_per_node=2,
        ntasks_per_node=2,
        cpus_per_task=8,
        time="00:30:00",
        account="def-smith",
    )
    return JobSpec(**{**base, **kw})


def test_jobspec_check_accepts_the_need_in_any_time_format():
    assert check.check_jobspec(good_spec())
    assert check.check_jobspec(good_spec(time="30"))


def test_jobspec_check_rejects_plausible_mistakes_with_true_hints():
    r = check.check_jobspec(good_spec(gpus_per_node=4))
    assert not r and "8 GPUs in all" in r.message
    r = check.check_jobspec(good_spec(cpus_per_task=16))
    assert not r and "32 cores" in r.message
    r = check.check_jobspec(good_spec(ntasks_per_node=1))
    assert not r and "one task" in r.message
    r = check.check_jobspec(good_spec(time="30:00:00"))
    assert not r and "108000 s" in r.message
    r = check.check_jobspec(good_spec(account=""))
    assert not r and "account" in r.message
    assert not check.check_jobspec("#SBATCH --nodes=2")


def save_solution(obj, path):
    d = os.path.dirname(os.path.abspath(path))
    with tempfile.NamedTemporaryFile(dir=d, delete=False) as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(f.name, path)


def save_in_place(obj, path):
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def save_no_fsync(obj, path):
    torch.save(obj, path + ".tmp")
    os.replace(path + ".tmp", path)


def save_via_tmp_dir(obj, path):
    fd, tmp = tempfile.mkstemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    with os.fdopen(fd, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    shutil.copyfile(tmp, path)
    os.unlink(tmp)


def test_atomic_save_check_accepts_the_solution():
    assert check.check_atomic_save(save_solution)


def test_atomic_save_check_rejects_writing_in_place():
    r = check.check_atomic_save(save_in_place)
    assert not r and "rename" in r.message


def test_atomic_save_check_rejects_missing_fsync_and_copies():
    r = check.check_atomic_save(save_no_fsync)
    assert not r and "os.fsync" in r.message
    r = check.check_atomic_save(save_via_tmp_dir)
    assert not r and "same directory" in r.message


def test_atomic_save_check_catches_a_torn_write_by_kill_9():
    # the first (small) save is atomic, so the quick checks pass; the big one is written in place
    r = check.check_atomic_save(
        lambda o, p: save_solution(o, p) if o["step"] == 1 else save_in_place(o, p)
    )
    assert not r and "kill -9" in r.message


def test_array_plan_check():
    assert check.check_array_plan(lambda n, k: f"0-{n - 1}%{k}")
    r = check.check_array_plan(lambda n, k: f"0-{n}%{k}")
    assert not r and "17 tasks" in r.message
    r = check.check_array_plan(lambda n, k: f"0-{n - 1}")
    assert not r and "no %throttle" in r.message
    r = check.check_array_plan(lambda n, k: f"0-{n - 1}%1")
    assert not r and "wall-time model gives 320 min" in r.message
    r = check.check_array_plan(lambda n, k: f"0-{n - 1}%{2 * k}")
    assert not r and "8 tasks run at once on 4 GPUs" in r.message
