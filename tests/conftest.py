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
    """Fails the test if it leaves child processes of this pytest process alive."""
    me = psutil.Process(os.getpid())
    before = {p.pid for p in me.children(recursive=True)}
    yield
    gone, alive = psutil.wait_procs(
        [p for p in me.children(recursive=True) if p.pid not in before], timeout=3
    )
    assert not alive, f"processes left behind: {[(p.pid, p.name()) for p in alive]}"
