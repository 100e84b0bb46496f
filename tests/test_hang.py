"""Chapter 06: a planted collective fault ends within the timeout, the right tool names the rank,
and no rank is left behind."""

from __future__ import annotations

import pytest

from hpclab.config import ConfigError
from hpclab.ddp.hang_stacks import culprit, parse_dump
from hpclab.profiling.pyspy_tool import available, ptrace_note


@pytest.mark.parametrize("bad_rank", [1, 0])
def test_skip_timeout_and_monitored_barrier_name_the_rank(no_orphans, bad_rank):
    # ~2 x (1 s timeout + launch): the rank that never reaches the collective
    from hpclab import experiments

    res = experiments.run("hang", fault="skip", ranks=3, bad_rank=bad_rank, timeout_s=1.0)
    by_tool = {r["tool"]: r for r in res.records}
    assert set(by_tool) == {"timeout only", "monitored_barrier", "py-spy dump"}
    spy = by_tool["py-spy dump"]
    if available() or "forbidden" in ptrace_note():  # the record says why, and names no rank
        assert spy["named_rank"] == -1 and spy["message"] in (available(), ptrace_note())
        return
    # every rank's stack, read while the others wait: the one outside the collective, its line
    assert spy["named_rank"] == bad_rank and spy["found"], spy["message"]
    assert "hang.py:" in spy["message"] and "time.sleep" in spy["message"]
    if bad_rank:  # rank 0 runs the monitored barrier and names the missing rank
        barrier = by_tool["monitored_barrier"]
        assert barrier["named_rank"] == bad_rank and barrier["found"]
        assert f"Ranks {bad_rank} failed to pass monitoredBarrier" in barrier["message"]
    # the launcher sees which rank was still running when its peers timed out
    assert by_tool["timeout only"]["named_rank"] == bad_rank
    assert "hung" in by_tool["timeout only"]["message"]
    for r in res.records:
        assert r["culprit"] == bad_rank and r["fault"] == "skip"


def test_shape_mismatch_detail_names_the_rank_plain_crash_names_no_shape(no_orphans):
    # < 2 s: both runs fail at once
    import torch.distributed as dist

    from hpclab import experiments

    before = dist.get_debug_level()
    res = experiments.run("hang", fault="shape", ranks=3, bad_rank=2, timeout_s=2.0)
    by_tool = {r["tool"]: r for r in res.records}
    detail = by_tool["TORCH_DISTRIBUTED_DEBUG=DETAIL"]
    assert detail["found"] and detail["named_rank"] == 2
    assert "Detected mismatch between collectives" in detail["message"]
    assert "TensorShape=[5]" in detail["message"] or "TensorShape=[4]" in detail["message"]
    plain = by_tool["timeout only"]
    # gloo stops the run (a rank aborts on a size it did not expect) but names no shape
    assert plain["named_rank"] >= 0 and "TensorShape" not in plain["message"]
    assert dist.get_debug_level() == before  # the parent's debug level is restored


def test_hang_config_rejects_a_rank_outside_the_run():
    from hpclab.ddp.hang import HangConfig

    with pytest.raises(ConfigError, match="bad_rank=2 is not a rank of 2"):
        HangConfig.create(bad_rank=2)
    with pytest.raises(ConfigError, match="allowed: one of skip, shape"):
        HangConfig.create(fault="deadlock")


DUMP = """Process 41: python -m hpclab.cli run hang
Python v3.11.7 (/usr/bin/python3.11)

Thread 41 (idle): "MainThread"
    all_reduce (torch/distributed/distributed_c10d.py:2806)
        Arguments:
            tensor: <Tensor at 0x7f>
        Locals:
            op: <RedOpType at 0x7f>
    wrapper (torch/distributed/c10d_logger.py:81)
    planted_worker (hpclab/ddp/hang.py:84)
        Arguments:
            ctx: <RankContext at 0x7f>
        Locals:
            rank: {rank}
            x: <Tensor at 0x7f>
            step: 2
    _main (hpclab/dist/child.py:60)
"""


def test_stacks_name_the_rank_outside_the_collective():
    # py-spy's dump format (frames innermost first, --locals under each): no process needed
    waiting = [parse_dump(DUMP.format(rank=r), "planted_worker") for r in (0, 2)]
    assert [s.rank for s in waiting] == [0, 2] and all(s.in_collective for s in waiting)
    assert waiting[0].step == 2 and waiting[0].where == "hang.py:84"
    away = DUMP.format(rank=1).replace(
        "    all_reduce (torch/distributed/distributed_c10d.py:2806)\n", "    load (data.py:9)\n"
    )
    stuck = parse_dump(away, "planted_worker")
    assert stuck is not None and not stuck.in_collective
    named, message = culprit({0: waiting[0], 1: stuck, 2: waiting[1]})
    assert named == 1 and "rank 1 is at hang.py:84" in message and "[0, 2]" in message
    assert culprit({0: waiting[0], 2: waiting[1]})[0] == -1  # all inside: no culprit
    assert parse_dump(DUMP.format(rank=0), "train_step") is None  # not the worker's process


def test_nccl_log_names_the_rank_the_timeouts_leave_out():
    from hpclab.ddp.nccl_log import reference_log, silent_ranks

    text = reference_log()
    assert "A RECONSTRUCTION, NOT A CAPTURED LOG" in text  # never shown as a real capture
    assert silent_ranks(text) == {"ranks": [0, 1, 2, 3], "waited": [0, 1, 2], "silent": [3]}
    # rank 3 waiting too and rank 1 silent: the answer follows the log, not the file
    lines = [ln for ln in text.splitlines() if "[Rank 1] Watchdog" not in ln]
    rank2 = next(ln for ln in lines if "[Rank 2] Watchdog caught" in ln)
    lines.append(rank2.replace("[Rank 2]", "[Rank 3]"))
    assert silent_ranks("\n".join(lines))["silent"] == [1]
    assert silent_ranks("NCCL INFO Connected all rings")["silent"] == []  # no timeout: nobody


def test_stacks_are_read_in_a_jupyter_kernels_colour_environment(no_orphans, monkeypatch):
    # a kernel sets FORCE_COLOR and CLICOLOR_FORCE: py-spy then colours every name and line
    # number, and the stacks were never recognised (the watch gave up after its whole limit)
    from hpclab.ddp.hang import dump_hung_ranks

    if available() or "forbidden" in ptrace_note():
        pytest.skip(available() or ptrace_note())
    for name in ("FORCE_COLOR", "CLICOLOR_FORCE", "CLICOLOR"):
        monkeypatch.setenv(name, "1")
    rank, message = dump_hung_ranks(2, 1)
    assert rank == 1 and "hang.py:" in message and "\x1b" not in message, message


def test_no_py_spy_starts_before_every_rank_exists(monkeypatch):
    # ~0.6 s. A py-spy started while a rank is being forked leaks its pipes into that rank, and
    # its start waits until the rank exits (the whole hold): the watch waits for every rank.
    import hpclab.profiling.pyspy_tool as pyspy
    from hpclab.ddp.hang_stacks import watch

    if available() or "forbidden" in ptrace_note():
        pytest.skip(available() or ptrace_note())
    dumped: list[int] = []
    monkeypatch.setattr(pyspy, "dump", lambda pid, **_: dumped.append(pid) or "")
    stacks, why = watch(lambda: [101], 2, 2, "planted_worker", 0.3)  # one of two ranks there
    assert dumped == [] and stacks == {} and why == "the ranks never all reached the last step"
    watch(lambda: [101, 102], 2, 2, "planted_worker", 0.3)  # both there: both are read
    assert dumped[:2] == [101, 102]
