"""The rank launcher's contract (DESIGN.md "Launching ranks"), on 2 gloo ranks on CPU."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

import psutil
import pytest
import torch
import torch.distributed as dist

from hpclab.dist import LaunchError, RankError, launch
from hpclab.dist.launcher import LaunchTimeout
from hpclab.progress import Cancelled, Progress


def _sum_ranks(ctx, offset):
    t = torch.tensor([float(ctx.rank + offset)])
    dist.all_reduce(t)
    print("this must not reach the parent's stdout")
    return {
        "rank": ctx.rank,
        "sum": t.item(),
        "threads": torch.get_num_threads(),
        "pid": os.getpid(),
    }


def _raise_on_rank1(ctx):
    if ctx.rank == 1:
        raise ValueError("deliberate failure on rank one")
    t = torch.ones(1)
    dist.all_reduce(t)  # rank 0 would wait here for rank 1
    return 0


def _hang_on_rank1(ctx):
    if ctx.rank == 1:
        time.sleep(600)
    t = torch.ones(1)
    dist.all_reduce(t)
    return 0


def _kill_self_on(ctx, victim, how):
    """Both ranks meet once; then ``victim`` dies by ``how`` while the other keeps reducing."""
    t = torch.ones(1)
    dist.all_reduce(t)
    if ctx.rank == victim:
        if how == "exit3":
            os._exit(3)
        os.kill(os.getpid(), how)
    for _ in range(100_000):
        dist.all_reduce(t)
    return 0


def _killed_while_peer_hangs(ctx):
    """Rank 1 hangs outside any collective (it would never notice); rank 0 is killed."""
    if ctx.rank == 0:
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)


def _cause_and_effects(err):
    lines = str(err).splitlines()
    return lines[0], [line for line in lines[1:] if line.startswith("  then: ")]


def _sleep_forever(ctx):
    time.sleep(600)


def _with_grandchild(ctx):
    import subprocess

    subprocess.Popen(["sleep", "600"])
    raise RuntimeError("rank with a child process fails")


def _report_progress(ctx, steps):
    for i in range(steps):
        ctx.progress(i + 1, steps, f"step {i + 1}")
        time.sleep(0.05)
    return ctx.rank


def test_results_come_back_by_rank(no_orphans, capfd):
    out = launch(_sum_ranks, 2, args=(10,), threads_per_rank=1)
    assert [o["rank"] for o in out] == [0, 1]
    assert all(o["sum"] == 21.0 for o in out)  # (0+10) + (1+10)
    assert all(o["threads"] == 1 for o in out)
    assert out[0]["pid"] != out[1]["pid"] != os.getpid()
    captured = capfd.readouterr()
    assert "must not reach" not in captured.out + captured.err


def test_threads_per_rank_defaults_to_usable_cores_split():
    from hpclab.measure.sysinfo import usable_cores

    out = launch(_sum_ranks, 2, args=(0,))
    assert out[0]["threads"] == max(1, usable_cores() // 2)


def test_rerun_in_same_process_works():
    for _ in range(3):
        assert [o["sum"] for o in launch(_sum_ranks, 2, args=(0,), threads_per_rank=1)] == [
            1.0,
            1.0,
        ]


@pytest.mark.parametrize(
    "how, cause",
    [
        (signal.SIGKILL, "was killed by SIGKILL (signal 9)"),
        (signal.SIGTERM, "was killed by SIGTERM (signal 15)"),
        ("exit3", "exited with code 3 before returning a result"),
    ],
)
def test_the_rank_that_died_is_named_first_not_the_peer_that_noticed(no_orphans, how, cause):
    with pytest.raises(RankError) as info:
        launch(_kill_self_on, 2, args=(1, how), threads_per_rank=1, timeout_s=20)
    first, then = _cause_and_effects(info.value)
    assert first == f"rank 1 of 2 {cause}"
    assert info.value.rank == 1 and info.value.summary == cause
    # Rank 0 noticed ("Connection closed by peer") and follows, in one line, as a consequence.
    assert len(then) == 1 and then[0].startswith("  then: rank 0 of 2 "), str(info.value)


def test_rank_0_can_be_the_cause_too(no_orphans):
    with pytest.raises(RankError) as info:
        launch(_kill_self_on, 2, args=(0, signal.SIGKILL), threads_per_rank=1, timeout_s=20)
    first, then = _cause_and_effects(info.value)
    assert first == "rank 0 of 2 was killed by SIGKILL (signal 9)"
    assert then[0].startswith("  then: rank 1 of 2 ")


def test_raising_rank_fails_fast_with_its_traceback(no_orphans):
    with pytest.raises(RankError) as info:
        launch(_raise_on_rank1, 2, threads_per_rank=1, timeout_s=20)
    err = info.value
    first, then = _cause_and_effects(err)
    assert first == "rank 1 of 2 failed: ValueError: deliberate failure on rank one"
    assert err.rank == 1 and then[0].startswith("  then: rank 0 of 2 ")
    assert "Traceback" in err.traceback and "_raise_on_rank1" in err.traceback
    assert "--- traceback of rank 1 ---" in str(err)


def test_a_killed_rank_is_named_while_its_peer_hangs_outside_collectives(no_orphans):
    with pytest.raises(RankError) as info:
        launch(_killed_while_peer_hangs, 2, threads_per_rank=1, timeout_s=20)
    # not the 20 s timeout: the launcher stopped the hanging peer (said in its line below)
    first, then = _cause_and_effects(info.value)
    assert first == "rank 0 of 2 was killed by SIGKILL (signal 9)"
    assert then == ["  then: rank 1 of 2 was still running; stopped by the launcher"]


def test_a_rank_that_hangs_in_a_collective_is_named_not_the_one_that_timed_out(no_orphans):
    t0 = time.monotonic()
    with pytest.raises(RankError) as info:
        launch(_hang_on_rank1, 2, threads_per_rank=1, timeout_s=3)
    elapsed = time.monotonic() - t0
    assert elapsed >= 3, f"took {elapsed:.1f}s"  # it waited for the process-group timeout
    first, then = _cause_and_effects(info.value)
    assert info.value.rank == 1
    assert first.startswith("rank 1 of 2 hung: still running when rank(s) 0 timed out waiting")
    assert "timeout_s=3" in first
    assert len(then) == 1 and then[0].startswith("  then: rank 0 of 2 failed: ")
    assert "Timed out" in then[0] and "\n" not in then[0]


def test_deadline_stops_a_run_outside_collectives(no_orphans):
    with pytest.raises(LaunchTimeout):
        launch(_sleep_forever, 2, threads_per_rank=1, deadline_s=1.0)


def test_grandchildren_are_killed_too():
    me = psutil.Process()
    with pytest.raises(RankError):
        launch(_with_grandchild, 1, threads_per_rank=1)
    time.sleep(0.2)
    left = [p for p in me.children(recursive=True) if "sleep" in " ".join(p.cmdline())]
    assert not left


def test_cancel_stops_all_ranks(no_orphans):
    progress = Progress()
    threading.Timer(0.5, progress.cancel).start()
    with pytest.raises(Cancelled):  # the ranks sleep forever: only the cancel ends the launch
        launch(_sleep_forever, 2, threads_per_rank=1, progress=progress)


def test_progress_of_rank0_reaches_the_callback():
    seen = []
    progress = Progress(lambda done, total, note: seen.append((done, total, note)))
    assert launch(_report_progress, 2, args=(4,), threads_per_rank=1, progress=progress) == [0, 1]
    assert [s[0] for s in seen] == [1, 2, 3, 4]
    assert seen[-1] == (4, 4, "step 4")


def test_two_launches_at_once_do_not_collide():
    results = {}

    def go(key):
        results[key] = launch(_sum_ranks, 2, args=(key,), threads_per_rank=1)

    threads = [threading.Thread(target=go, args=(k,)) for k in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert [o["sum"] for o in results[1]] == [3.0, 3.0]
    assert [o["sum"] for o in results[2]] == [5.0, 5.0]


def test_back_to_back_launches_all_rendezvous_quickly():
    # With a TCPStore rendezvous, 1 launch in ~20 stalled here (reverse DNS of the peer in the
    # store's server): 20 launches with a 3 s timeout would then fail more often than not.
    for key in range(20):
        assert [o["sum"] for o in launch(_sum_ranks, 2, args=(key,), timeout_s=3)] == [
            float(2 * key + 1)
        ] * 2


def _gloo_endpoints(ctx):
    import psutil

    conns = psutil.Process().net_connections(kind="tcp")
    return os.environ.get("GLOO_SOCKET_IFNAME"), sorted({c.laddr.ip for c in conns if c.laddr})


def test_gloo_ranks_talk_over_loopback_unless_told_otherwise(monkeypatch):
    for ifname, ips in launch(_gloo_endpoints, 2, threads_per_rank=1):
        assert ifname == "lo"
        assert ips and all(ip in ("127.0.0.1", "::ffff:127.0.0.1") for ip in ips), ips
    # A user's own choice is kept, and gloo really uses it.
    other = {
        name: [a.address for a in addrs if a.family == socket.AF_INET]
        for name, addrs in psutil.net_if_addrs().items()
        if name != "lo"
    }
    other = {name: ips for name, ips in other.items() if ips}
    if not other:
        pytest.skip("no interface besides lo has an IPv4 address")
    name, ips = next(iter(other.items()))
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", name)
    for ifname, used in launch(_gloo_endpoints, 2, threads_per_rank=1):
        assert ifname == name
        assert set(ips) & {ip.removeprefix("::ffff:") for ip in used}, (ips, used)


def test_single_rank_needs_no_process_group():
    def probe(ctx):
        return (ctx.backend, ctx.distributed, dist.is_initialized())

    assert launch(probe, 1) == [("none", False, False)]


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"world_size": 0}, "world_size=0"),
        ({"world_size": 2, "device": "cuda"}, "device='cuda' needs one GPU per rank: ranks=2"),
        ({"world_size": 2, "backend": "mpi"}, "backend='mpi'"),
    ],
)
def test_bad_requests_are_refused_in_one_line(kwargs, fragment):
    world = kwargs.pop("world_size")
    if "cuda" in kwargs.values() and torch.cuda.device_count() >= world:
        pytest.skip("this machine has enough GPUs")
    with pytest.raises(LaunchError) as info:
        launch(_sum_ranks, world, args=(0,), **kwargs)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_spawn_refuses_a_function_from_main():
    def local(ctx):
        return 1

    local.__module__ = "__main__"
    with pytest.raises(LaunchError, match="spawn cannot import it"):
        launch(local, 1, start_method="spawn")


def test_ctrl_c_in_the_parent_stops_every_rank(tmp_path):
    """A kernel interrupt is SIGINT to the parent only: the ranks must still go."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "parent.py"
    script.write_text(
        "import time\n"
        "from hpclab.dist import launch\n"
        "def nap(ctx):\n"
        "    time.sleep(600)\n"
        "try:\n"
        "    launch(nap, 2, threads_per_rank=1)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', flush=True)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    proc = psutil.Process(parent.pid)
    deadline = time.monotonic() + 30
    while len(proc.children()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    ranks = proc.children(recursive=True)
    assert len(ranks) >= 2
    time.sleep(0.3)
    parent.send_signal(signal.SIGINT)
    out, _ = parent.communicate(timeout=15)
    assert "interrupted" in out
    _, alive = psutil.wait_procs(ranks, timeout=5)
    assert not alive


# --- backend="none" with several ranks, and fork after OpenMP (used by chapter 05) ----------


def _write_own_slot(ctx, shared):
    assert not ctx.distributed and ctx.backend == "none"
    shared[ctx.rank] = ctx.rank + 1.0
    return ctx.world_size


def test_backend_none_runs_several_ranks_that_share_a_tensor():
    shared = torch.zeros(3).share_memory_()
    assert launch(_write_own_slot, 3, args=(shared,), backend="none") == [3, 3, 3]
    assert shared.tolist() == [1.0, 2.0, 3.0]  # every rank wrote into the parent's tensor
    private = torch.zeros(2)  # not shared: each forked rank writes its own copy
    launch(_write_own_slot, 2, args=(private,), backend="none")
    assert private.tolist() == [0.0, 0.0]


def _gemm_threads(ctx):
    a = torch.randn(128, 128)
    for _ in range(3):
        a = (a @ a).tanh()
    return torch.get_num_threads()


def test_fork_after_a_multithreaded_gemm_in_the_parent_does_not_hang():
    # libgomp keeps its pool per OS thread with no fork handler: a rank forked from the thread
    # that ran this GEMM would hang in its own first parallel GEMM.
    torch.set_num_threads(2)
    b = torch.randn(512, 512)
    _ = b @ b
    assert launch(_gemm_threads, 1, threads_per_rank=2, backend="none", deadline_s=30) == [2]


# --- one rank in this process, for debugging a worker ----------------------------------------


def _inprocess_probe(ctx, value):
    ctx.progress(1, 1, "half way")
    t = torch.tensor([value])
    if ctx.distributed:
        dist.all_reduce(t)
    return {
        "pid": os.getpid(),
        "threads": torch.get_num_threads(),
        "omp": os.environ.get("OMP_NUM_THREADS"),
        "grouped": dist.is_initialized(),
        "sum": t.item(),
        "ctx": ctx,
    }


def _inprocess_fails(ctx):
    raise KeyError("look here")


def test_inprocess_runs_rank_0_here_with_the_same_context_and_teardown(no_orphans):
    import dataclasses

    seen = []
    before = torch.get_num_threads()
    out = launch(
        _inprocess_probe,
        1,
        args=(2.0,),
        threads_per_rank=3,
        inprocess=True,
        progress=Progress(lambda d, t, n: seen.append(n)),
    )[0]
    assert out["pid"] == os.getpid()  # a debugger or breakpoint() stops in the worker
    assert out["threads"] == 3 and out["omp"] == "3" and out["ctx"].threads == 3
    assert (out["ctx"].rank, out["ctx"].world_size, out["ctx"].backend) == (0, 1, "none")
    assert seen == ["half way"] and not out["grouped"]
    assert torch.get_num_threads() == before  # the thread setting is restored afterwards
    with pytest.raises(dataclasses.FrozenInstanceError):
        out["ctx"].rank = 1  # what a rank is does not change mid-run
    # With a backend the one rank gets a process group, torn down after, so it runs again.
    for _ in range(2):
        out = launch(_inprocess_probe, 1, args=(2.0,), backend="gloo", inprocess=True)[0]
        assert out["grouped"] and out["sum"] == 2.0 and not dist.is_initialized()


def test_inprocess_raises_the_workers_own_exception_and_refuses_several_ranks():
    with pytest.raises(KeyError, match="look here") as info:
        launch(_inprocess_fails, 1, inprocess=True)
    assert info.traceback[-1].name == "_inprocess_fails"  # post-mortem lands in the worker
    with pytest.raises(LaunchError, match="inprocess=True runs one rank") as refused:
        launch(_inprocess_fails, 2, inprocess=True)
    assert "\n" not in str(refused.value)


# --- the diagnosis alone: which failure is the cause ------------------------------------------


def test_diagnosis_orders_causes_before_consequences():
    from hpclab.dist.failures import Failure, diagnose, is_peer_loss

    closed = "RuntimeError: [../gloo/transport/tcp/pair.cc:553] Connection closed by peer [::1]:5"
    assert is_peer_loss(RuntimeError(closed.split(": ", 1)[1]))
    assert not is_peer_loss(TimeoutError("my data source timed out"))  # the worker's own error
    # The peer's error came *before* the parent saw the death: the death is still the cause.
    err = diagnose(
        [Failure(0, 1.0, closed, "tb0", peer_loss=True), Failure(2, 1.5, exitcode=-9)],
        3,
        running=[1],
        finished=[],
        timeout_s=30,
    )
    assert (err.rank, err.summary, err.traceback) == (2, "was killed by SIGKILL (signal 9)", "")
    assert err.consequences == (
        "rank 0 of 3 failed: RuntimeError: Connection closed by peer [::1]:5",
        "rank 1 of 3 was still running; stopped by the launcher",
    )
    # Two ranks raising their own errors: the earlier one is the cause.
    err = diagnose(
        [Failure(1, 2.0, "KeyError: 'b'", "tb1"), Failure(0, 1.0, "ValueError: a", "tb0")],
        2,
        running=[],
        finished=[],
        timeout_s=30,
    )
    assert str(err).splitlines()[:2] == [
        "rank 0 of 2 failed: ValueError: a",
        "  then: rank 1 of 2 failed: KeyError: 'b'",
    ]


def test_left_behind_names_what_a_run_left_but_not_the_forkserver():
    """Where a GPU is visible ranks start from multiprocessing's forkserver, which (with its
    resource tracker) stays as the launching process's child to start the next run: a check for
    processes left after a failed run must not count it (an H100 run of chapter 05 counted 2)."""
    from hpclab.dist import left_behind

    with pytest.raises(RankError):
        launch(_with_grandchild, 2, threads_per_rank=1, timeout_s=30, start_method="forkserver")
    kids = psutil.Process().children(recursive=True)
    assert any("multiprocessing.forkserver" in " ".join(p.cmdline()) for p in kids)
    assert left_behind() == []  # the ranks and the grandchild each started are gone
    stray = psutil.Popen(["sleep", "30"])
    try:
        assert [p.pid for p in left_behind()] == [stray.pid]
    finally:
        stray.kill()
        stray.wait()


def _session(ctx):
    return os.getsid(0), os.getpid()


def test_each_rank_leads_a_session_of_its_own(no_orphans):
    """As torchrun does: with autogroup scheduling, ranks left in the launcher's session share
    that session's CPU weight (FSDP2's step on 2 gloo ranks: 84 ms there, 77 ms each in its own)."""
    outs = launch(_session, 2, threads_per_rank=1, timeout_s=20)
    assert all(sid == pid for sid, pid in outs)
    assert os.getsid(0) not in {sid for sid, _ in outs}
