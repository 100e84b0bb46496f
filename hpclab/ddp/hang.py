"""Experiment ``hang``: a planted collective fault on gloo ranks, and which tool names the rank
(chapter 06, "Finding the rank that hangs").

Two faults, each on one rank (``bad_rank``) at the last of a few all-reduce steps:

- ``skip``: the rank does something else (sleeps, as if stuck in its data loader) instead of
  calling the collective. Its peers wait in ``all_reduce``. With only a timeout, gloo's error on
  a peer says "Timed out waiting ... for recv": it names the rank that *waited*; hpclab's
  launcher then sees who was still running. ``dist.monitored_barrier`` before the collective
  (host side, gloo) makes rank 0 report "Ranks 1 failed to pass monitoredBarrier".
- ``shape``: the rank calls ``all_reduce`` with a tensor of another shape. gloo aborts the
  *receiving* rank ("Received data size doesn't match expected size"), which is not the
  culprit; with ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` every collective is first checked across
  ranks, and the error names both ranks with their shapes (PyTorch docs, "Debugging
  torch.distributed applications").

Every run ends within about ``timeout_s`` (the process-group timeout, seconds here, not the
default 30 minutes) and the launcher kills every rank afterwards: nothing is left behind.
"""

from __future__ import annotations

import datetime
import os
import random
import re
import time
from dataclasses import dataclass
from typing import Any

import torch

from hpclab.config import Config, ConfigError, param
from hpclab.dist import RankContext, RankError, launch
from hpclab.progress import Progress
from hpclab.results import Result, make_result

FAULTS = ("skip", "shape")
STEPS = 3  # the fault is planted in the last step
SHAPE = 4  # the tensor every rank should reduce
# Which debugging aid goes with each fault, beside the bare timeout.
TOOLS = {"skip": "monitored_barrier", "shape": "TORCH_DISTRIBUTED_DEBUG=DETAIL"}
# How long py-spy may watch the planted hang before giving up. It returns once the hang is seen:
# measured from the watch's start (launch included) on a 2-core VM beside other work, 5 runs
# each, 2 ranks took at most 0.13 s, quiet or beside 2 busy processes; 8 ranks at most 0.45 s
# quiet, 0.67 s beside 2 busy ones (in a Jupyter kernel, through the panel: 0.24 s, 0.57 s).
# The slowest seen, 2.5 s, was 8 ranks beside 2-4 busy processes at load average 6. 20 s is 8x
# that, and a broken watch fails within it (90 s once: the watch never saw a hang through
# py-spy's colour codes, or waited on a py-spy start that raced a rank's fork; both fixed, in
# pyspy_tool.dump and hang_stacks.watch).
WATCH_S = 20.0


@dataclass(frozen=True)
class HangConfig(Config):
    fault: str = param(
        "skip",
        choices=FAULTS,
        help="skip: a rank misses a collective; shape: a rank passes another tensor shape",
    )
    ranks: int = param(2, min=2, max=8, help="gloo ranks")
    bad_rank: int = param(1, min=-1, max=7, help="the rank with the planted fault (-1: at random)")
    timeout_s: float = param(2.0, min=0.5, max=60.0, help="process-group timeout (seconds)")

    def check(self) -> None:
        if self.bad_rank >= self.ranks:
            raise ConfigError(
                f"bad_rank={self.bad_rank} is not a rank of {self.ranks}; allowed: "
                f"0..{self.ranks - 1}"
            )


def planted_worker(
    ctx: RankContext, fault: str, bad_rank: int, monitored: bool, timeout_s: float
) -> float:
    """A few all-reduce steps; at the last one ``bad_rank`` misbehaves (see the module doc)."""
    import torch.distributed as dist

    rank = ctx.rank  # a local, so that py-spy's dump of this frame says which rank it is
    x = torch.ones(SHAPE)
    for step in range(STEPS):
        if rank == bad_rank and step == STEPS - 1:
            if fault == "skip":
                time.sleep(5 * timeout_s)  # busy elsewhere: never reaches the collective
                return float(x[0])
            x = torch.ones(SHAPE + 1)  # the planted bug: another shape on one rank
        if monitored:
            dist.monitored_barrier(
                timeout=datetime.timedelta(seconds=timeout_s), wait_all_ranks=True
            )
        dist.all_reduce(x)
    return float(x[0])


def named_rank(err: RankError) -> int:
    """The rank a failure points at: the one a monitored barrier or DETAIL's check names, else
    the launcher's root cause."""
    text = str(err)
    m = re.search(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier", text)
    if m:
        return int(m.group(1).split(",")[0])
    shapes = re.findall(r"Rank (\d+) is running collective: .*?TensorShape=\[([\d, ]*)\]", text)
    odd = [int(r) for r, s in shapes if s != str(SHAPE)]
    if odd:  # DETAIL names ranks with their shapes: the culprit's is not the program's
        return odd[0]
    return err.rank


def _detail_debug(on: bool) -> Any:
    """Switch TORCH_DISTRIBUTED_DEBUG for ranks forked from here; returns the undo."""
    import torch.distributed as dist

    old_env, old_level = os.environ.get("TORCH_DISTRIBUTED_DEBUG"), dist.get_debug_level()
    if on:
        os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
        dist.set_debug_level_from_env()  # read once per process: set it before the fork

    def undo() -> None:
        if old_env is None:
            os.environ.pop("TORCH_DISTRIBUTED_DEBUG", None)
        else:
            os.environ["TORCH_DISTRIBUTED_DEBUG"] = old_env
        dist.set_debug_level(old_level)

    return undo


def dump_hung_ranks(ranks: int, bad: int) -> tuple[int, str]:
    """Plant ``skip`` on rank ``bad`` with a long timeout, read every rank's stack with py-spy
    while the others wait (:mod:`hpclab.ddp.hang_stacks`), then cancel the run, as one would
    ``scancel`` a stuck job after the dumps; returns the rank the stacks name and what they say."""
    import threading

    import psutil

    from hpclab.ddp.hang_stacks import culprit, watch
    from hpclab.progress import Cancelled

    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    inner, seen = Progress(), {}

    def spy() -> None:
        def pids() -> list[int]:
            return [p.pid for p in me.children(recursive=True) if p.pid not in before]

        seen["stacks"], seen["why"] = watch(pids, ranks, STEPS - 1, "planted_worker", WATCH_S)
        inner.cancel()

    thread = threading.Thread(target=spy, name="hpclab-py-spy", daemon=True)
    thread.start()
    hold = WATCH_S + 10.0  # process-group timeout: the hang outlasts the watch, then ends
    try:
        launch(
            planted_worker,
            ranks,
            args=("skip", bad, False, hold),
            device="cpu",
            timeout_s=hold,
            deadline_s=hold + 30,
            progress=inner,
        )
    except (Cancelled, RankError):
        pass
    thread.join()
    return culprit(seen["stacks"]) if seen["stacks"] else (-1, seen["why"])


def run_hang(config: HangConfig, progress: Progress) -> Result:
    bad = random.randrange(config.ranks) if config.bad_rank < 0 else config.bad_rank
    records = []
    tools = ("timeout only", TOOLS[config.fault]) + (
        ("py-spy dump",) if config.fault == "skip" else ()
    )
    for i, tool in enumerate(tools):
        progress.update(i, len(tools), tool)
        if tool == "py-spy dump":
            t0 = time.perf_counter()
            named, message = dump_hung_ranks(config.ranks, bad)
            records.append(_record(config, tool, bad, named, t0, message))
            continue
        undo = _detail_debug(tool.endswith("DETAIL"))
        t0 = time.perf_counter()
        try:
            launch(
                planted_worker,
                config.ranks,
                args=(config.fault, bad, tool == "monitored_barrier", config.timeout_s),
                device="cpu",
                timeout_s=config.timeout_s,
                deadline_s=10 * config.timeout_s + 30,
            )
            named, message = -1, "no error: the fault went unnoticed"
        except RankError as err:
            named, message = named_rank(err), str(err).splitlines()[0]
        finally:
            undo()
        records.append(_record(config, tool, bad, named, t0, message))
    progress.update(len(tools), len(tools), "done")
    return make_result("hang", config, records)


def _record(
    config: HangConfig, tool: str, bad: int, named: int, t0: float, message: str
) -> dict[str, Any]:
    return {
        "tier": "live",
        "fault": config.fault,
        "tool": tool,
        "ranks": config.ranks,
        "culprit": bad,
        "named_rank": named,
        "found": named == bad,
        "seconds": time.perf_counter() - t0,
        "message": message,
    }


def plot_hang(result: Result) -> Any:
    """Seconds until each run ended, by tool; the bar says which rank it named."""
    import plotly.graph_objects as go

    recs = result.records
    fig = go.Figure(
        go.Bar(
            x=[f"{r['fault']}: {r['tool']}" for r in recs],
            y=[r["seconds"] for r in recs],
            text=[
                f"named rank {r['named_rank']} ({'right' if r['found'] else 'wrong'})" for r in recs
            ],
            hovertext=[r["message"] for r in recs],
            marker_color=["#54A24B" if r["found"] else "#E45756" for r in recs],
        )
    )
    fig.update_layout(
        title="A planted collective fault: time to an error, and the rank it names",
        yaxis_title="seconds until the run ended",
        height=380,
    )
    return fig
