"""Chapter 07 checks accept the solutions and reject plausible wrong answers with true hints."""

from __future__ import annotations

import math
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


def _fsynced_beside(obj, path):
    """``obj`` saved to a new temporary file beside ``path``, flushed and fsynced; its name."""
    d = os.path.dirname(os.path.abspath(path))
    with tempfile.NamedTemporaryFile(dir=d, delete=False) as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    return f.name


def save_solution(obj, path):
    os.replace(_fsynced_beside(obj, path), path)


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


def save_path_then_fsync(obj, path):
    """Another right protocol: torch.save to a temporary name, fsync it through a new
    descriptor (same inode), rename, then fsync the directory too."""
    tmp = path + ".tmp"
    torch.save(obj, tmp)
    fd = os.open(tmp, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(path), os.O_RDONLY)
    os.fsync(dfd)
    os.close(dfd)


def save_fsync_directory_only(obj, path):
    """fsyncs the directory, never the file: any fsync is not the right fsync."""
    torch.save(obj, path + ".tmp")
    dfd = os.open(os.path.dirname(path), os.O_RDONLY)
    os.fsync(dfd)
    os.close(dfd)
    os.replace(path + ".tmp", path)


def save_fsync_unflushed(obj, path):
    """Serialises to bytes, writes them through a buffered file, fsyncs before flushing."""
    import io

    buf = io.BytesIO()
    torch.save(obj, buf)
    with open(path + ".tmp", "wb") as f:
        f.write(buf.getvalue())
        os.fsync(f.fileno())  # the bytes are still in Python's buffer
    os.replace(path + ".tmp", path)


def save_fsync_after_rename(obj, path):
    f = open(path + ".tmp", "wb")  # noqa: SIM115 - the mistake needs the file open past the rename
    torch.save(obj, f)
    f.flush()
    os.replace(path + ".tmp", path)
    os.fsync(f.fileno())
    f.close()


def save_remove_first(obj, path):
    """The Windows habit (os.rename there refuses an existing target): delete, then rename."""
    tmp = _fsynced_beside(obj, path)
    if os.path.exists(path):
        os.remove(path)
    os.rename(tmp, path)


def save_keep_backup(obj, path):
    """Moves the old checkpoint aside, then the new one in: two renames, a gap between them."""
    tmp = _fsynced_beside(obj, path)
    if os.path.exists(path):
        os.replace(path, path + ".bak")
    os.replace(tmp, path)


def test_atomic_save_check_accepts_the_solution():
    assert check.check_atomic_save(save_solution)
    assert check.check_atomic_save(save_path_then_fsync)


def test_atomic_save_check_wants_the_fsync_of_the_renamed_file_once_written():
    r = check.check_atomic_save(save_fsync_directory_only)
    assert not r and "os.fsync ran on a directory" in r.message, r.message
    r = check.check_atomic_save(save_fsync_unflushed)
    assert not r and "f.flush() before os.fsync" in r.message, r.message
    r = check.check_atomic_save(save_fsync_after_rename)
    assert not r and "comes after the rename" in r.message, r.message


def test_atomic_save_check_rejects_removing_the_old_checkpoint_first():
    r = check.check_atomic_save(save_remove_first)
    assert not r and "before the rename" in r.message and "no checkpoint" in r.message, r.message


def test_atomic_save_check_kills_the_writer_between_every_two_steps():
    # data synced and renamed in one step, but the old file is moved away first: only a kill
    # between the two renames finds the moment with no checkpoint
    r = check.check_atomic_save(save_keep_backup)
    assert not r and "after kill -9 after os.replace(ckpt.pt, ckpt.pt.bak)" in r.message, r.message
    assert "did not exist" in r.message


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


def test_array_plan_check_cases_where_n_over_k_is_not_k():
    # N // K equals K at 16/4 and 10/3: the extra cases 20/4 and 7/2 tell them apart
    r = check.check_array_plan(lambda n, k: f"0-{n - 1}%{n // k}")  # trials per GPU
    assert not r and "plan(20, 4) = '0-19%5' lets 5 tasks run at once" in r.message, r.message
    r = check.check_array_plan(lambda n, k: f"0-{n - 1}%{math.ceil(n / k)}")  # waves
    assert not r and "plan(10, 3) = '0-9%4' lets 4 tasks run at once" in r.message, r.message
    r = check.check_array_plan(lambda n, k: f"0-{n - 1}%0")  # said, not a ZeroDivisionError
    assert not r and "runs no task" in r.message, r.message
    # with at least as many GPUs as trials no throttle is needed
    assert check.check_array_plan(lambda n, k: f"0-{n - 1}%{k}" if n > k else f"0-{n - 1}")
