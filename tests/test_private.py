"""Students' data is private on a shared node: every directory the library creates for it is
0700 (files 0600 where they may travel), and a shared parent it did not create is left alone."""

from __future__ import annotations

import os
import stat

import pytest

from hpclab import private, results
from hpclab.cluster import checkpoint, runner, script
from hpclab.profiling import profile_experiment
from hpclab.storage import workspace


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture(autouse=True)
def _open_umask():
    old = os.umask(0o022)  # the usual default: what would leave directories 0755
    yield
    os.umask(old)


def test_private_dir_makes_every_new_level_0700_and_leaves_an_existing_parent(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    made = private.private_dir(shared / "a" / "b")
    assert made == shared / "a" / "b"
    assert _mode(shared / "a") == 0o700 and _mode(made) == 0o700
    assert _mode(shared) == 0o755  # not ours to close
    (made / "old").mkdir(mode=0o755)  # one an older version left open: closed on next use
    assert _mode(private.private_dir(made / "old")) == 0o700


def test_job_dirs_results_data_profiles_and_checkpoints_are_private(tmp_path, monkeypatch):
    monkeypatch.setenv("HPCLAB_JOBS_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("HPCLAB_DATA", str(tmp_path / "data" / "storage"))
    monkeypatch.setenv("HPCLAB_RESULTS", str(tmp_path / "results" / "runs.sqlite"))
    work = runner.new_workdir("ddp-2x2")
    assert _mode(tmp_path / "jobs") == 0o700 and _mode(work) == 0o700
    results.history()  # opens (creates) the store
    assert _mode(tmp_path / "results") == 0o700
    assert _mode(tmp_path / "results" / "runs.sqlite") == 0o600
    root = workspace.data_root()
    assert _mode(tmp_path / "data") == 0o700 and _mode(root) == 0o700
    lmdb = workspace.prepared("lmdb", 16, (1, 4, 4))
    assert _mode(lmdb.parent) == 0o700 and _mode(lmdb) == 0o700
    assert _mode(profile_experiment.output_dir(str(tmp_path / "prof" / "x"))) == 0o700
    ckpt = tmp_path / "ckpt" / "run"
    checkpoint.save_checkpoint(ckpt, 1, {"w": 1})
    assert _mode(tmp_path / "ckpt") == 0o700 and _mode(ckpt) == 0o700


def test_data_root_in_tmp_is_private_per_user(tmp_path, monkeypatch):
    monkeypatch.delenv("HPCLAB_DATA", raising=False)
    monkeypatch.delenv("SLURM_TMPDIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    root = workspace.data_root()
    assert root.parent.parent == tmp_path and _mode(root.parent) == 0o700


def test_a_jobs_node_local_scratch_is_created_0700():
    from hpclab.cluster import profiles
    from hpclab.cluster.spec import JobSpec

    text = script.render(JobSpec(name="x"), profiles.load("local"), ["true"])
    assert 'mkdir -p -m 0700 "$SLURM_TMPDIR"' in text
    # and every file the job writes is 0600 (directories 0700): the script's umask
    assert text.index("umask 077") < text.index("true\n")
