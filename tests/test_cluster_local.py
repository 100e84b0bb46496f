"""``local.connected()``: the Slurm that answers here, or the local one for the block (chapter 07)."""

from __future__ import annotations

import pytest

from hpclab.cluster import local
from hpclab.cluster.slurm import SlurmError


def test_connected_says_why_in_one_line_when_no_slurm_answers_and_none_starts(
    monkeypatch, tmp_path
):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch: connect() finds none
    monkeypatch.setattr(local, "SCRIPT", tmp_path / "local_slurm.sh")  # and up() cannot start one
    with pytest.raises(local.NoSlurm, match="local_slurm.sh is missing"):
        with local.connected():
            pytest.fail("the block ran without a cluster")


def test_connected_uses_the_slurm_that_answers_and_leaves_it_up(slurm):
    with pytest.raises(SlurmError, match="from the block") as caught:
        with local.connected() as cluster:
            assert "UP" in cluster.run("scontrol", "ping")
            raise SlurmError("from the block")
    assert not isinstance(caught.value, local.NoSlurm)  # the block's error is not "no Slurm"
    assert local.local_running()  # found, not started: not stopped after the block
