"""Memory is checked before it bites, and the out-of-memory killer is named after it bit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from hpclab.config import ConfigError
from hpclab.dist.failures import Failure, diagnose
from hpclab.measure import oom
from hpclab.measure.sysinfo import GIB


def test_a_sigkill_with_a_grown_counter_names_the_killer(monkeypatch):
    counts = iter([{"machine": 3, "/cg/memory.events": 0}, {"machine": 4, "/cg/memory.events": 1}])
    monkeypatch.setattr(oom, "oom_kill_counts", lambda pid="self": next(counts))
    monkeypatch.setattr(oom, "cgroup_mem_gb", lambda: 2.0)
    killer = oom.OomWatch().verdict()
    assert (
        killer == "the out-of-memory killer (the run went over its job's memory limit of 2.0 GiB)"
    )
    err = diagnose([Failure(1, 0.0, exitcode=-9, killer=killer)], 2, [], [0], 30)
    assert str(err).splitlines()[0] == (
        "rank 1 of 2 was killed by the out-of-memory killer (the run went over its job's memory "
        "limit of 2.0 GiB) with SIGKILL (signal 9)"
    )
    # only the machine's counter moved: someone on this machine ran out (a global OOM)
    counts = iter([{"machine": 3}, {"machine": 4}])
    assert "this machine ran out of memory" in oom.OomWatch().verdict()
    counts = iter([{"machine": 3}, {"machine": 3}])  # nothing moved: a plain kill -9
    assert oom.OomWatch().verdict() == ""
    assert Failure(1, 0.0, exitcode=-9).how() == "was killed by SIGKILL (signal 9)"


def test_preflight_refuses_with_both_numbers_and_warns_when_close(monkeypatch):
    monkeypatch.setattr(oom, "available_bytes", lambda: (8 * GIB, "available on this machine"))
    monkeypatch.setattr(oom, "runtime_bytes", lambda: 0.25 * GIB)
    assert oom.preflight("a run", 1 * GIB, 2, "use fewer") == ""  # far below: nothing measured
    with pytest.raises(ConfigError) as err:
        oom.preflight("64 ranks", 6 * GIB, 16, "use fewer ranks")
    assert str(err.value) == (
        "64 ranks would need about 10.0 GiB (16 processes x 0.25 GiB of Python and PyTorch + 6.0 GiB "
        "of tensors), and 8.0 GiB is available on this machine: use fewer ranks"
    )
    assert "close to the limit" in oom.preflight("a run", 6 * GIB, 2, "use fewer")


def test_the_runtime_of_a_rank_is_measured_not_assumed():
    per = oom.runtime_bytes()
    assert 10 * 2**20 < per < oom.GENEROUS_RUNTIME_BYTES  # torch's runtime: tens to hundreds of MB


def test_the_pipeline_and_the_celery_pool_are_checked_before_they_start(monkeypatch):
    from hpclab.experiments import get
    from hpclab.progress import Progress

    monkeypatch.setattr(oom, "available_bytes", lambda: (1 * GIB, "available on this machine"))
    monkeypatch.setattr(oom, "runtime_bytes", lambda: 0.3 * GIB)
    exp = get("pipeline")
    with pytest.raises(ConfigError, match=r"pipeline of 8 stages would need about .* GiB"):
        exp.run(exp.config.create(stages=8, width=4096, layers=64), Progress())
    exp = get("tensor-parallel")
    with pytest.raises(ConfigError, match=r"tensor parallelism on 8 ranks would need about"):
        exp.run(
            exp.config.create(ranks=8, in_features=4096, out_features=4096, batch_sizes=(8,)),
            Progress(),
        )
    from hpclab.search.broker import check_workers_fit

    with pytest.raises(ConfigError, match=r"16 Celery workers would need"):
        check_workers_fit(16)


def _memory_cgroup(limit_bytes: int) -> Path:
    """A fresh memory cgroup with ``limit_bytes`` (v1 or v2); skip where none can be made."""
    name = f"hpclab-oomtest-{uuid.uuid4().hex[:8]}"
    v1 = Path("/sys/fs/cgroup/memory")
    v2 = Path("/sys/fs/cgroup")
    try:
        if (v1 / "memory.limit_in_bytes").exists():
            cg = v1 / name
            cg.mkdir()
            (cg / "memory.limit_in_bytes").write_text(str(limit_bytes))
            return cg
        if "memory" in (v2 / "cgroup.subtree_control").read_text():
            cg = v2 / name
            cg.mkdir()
            (cg / "memory.max").write_text(str(limit_bytes))
            (cg / "memory.swap.max").write_text("0")
            return cg
    except OSError as exc:
        pytest.skip(f"no writable memory cgroup here: {exc}")
    pytest.skip("no memory cgroup controller here")


_HOG = """
import os, sys, time
open(os.path.join(sys.argv[1], "cgroup.procs"), "w").write(str(os.getpid()))
import torch
from hpclab.dist import RankError, launch

def hog(ctx):
    if ctx.rank == 1:
        keep = [torch.ones(2**24) for _ in range(1000)]  # 64 MiB at a time, up to 64 GiB
    time.sleep(60)

if __name__ == "__main__":
    try:
        launch(hog, 2, threads_per_rank=1, timeout_s=60)
    except RankError as err:
        print(str(err).splitlines()[0])
"""


def test_a_rank_killed_by_the_oom_killer_is_reported_as_such(tmp_path):
    """A real OOM kill: the launcher runs inside a memory cgroup of 1.5 GiB and rank 1
    allocates until the kernel kills it; the error's first line names the killer."""
    if os.geteuid() != 0:
        pytest.skip("making a cgroup needs root")
    cg = _memory_cgroup(int(1.5 * GIB))
    script = tmp_path / "hog.py"
    script.write_text(textwrap.dedent(_HOG))
    try:
        out = subprocess.run([sys.executable, str(script), str(cg)], capture_output=True,
                             text=True, timeout=120)  # fmt: skip
    finally:
        try:
            cg.rmdir()
        except OSError:
            pass
    assert out.stdout.strip().startswith(
        "rank 1 of 2 was killed by the out-of-memory killer (the run went over"
    ), out.stdout + out.stderr
    assert out.stdout.strip().endswith("with SIGKILL (signal 9)")
