"""Experiment ``profiler-overhead``: the same run bare and under each profiler (chapter 03).

Every profiler changes what it measures. Deterministic ones (cProfile, line_profiler,
tracemalloc, torch.profiler) hook every call, line, allocation or operator, so Python-heavy code
slows down more than code that spends its time inside one C call; sampling ones (py-spy,
memory_profiler's RSS sampler) look from outside every few milliseconds and cost almost nothing,
but can miss short events. The workload is the patient with its Python decoder (``slow-data``):
many small Python calls, the worst case for deterministic profilers. Rounds are interleaved
(bare, tool A, tool B, bare, ...) so a noisy neighbour slows every tool alike; each tool's
samples are wall times of the whole profiled call, setup included, as a student would feel it.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from hpclab.config import Config, param
from hpclab.display import figure
from hpclab.measure.timing import Timing
from hpclab.profiling import cprofile_tree, line_tool, memory_tool, pyspy_tool, torch_tool
from hpclab.profiling.patient import EncodedImages, train
from hpclab.progress import Progress
from hpclab.results import Result, make_result

TOOLS = ("cprofile", "line", "tracemalloc", "memory", "torch", "py-spy")
WHAT = {
    "bare": ("-", "no profiler"),
    "cprofile": ("deterministic", "every Python function call: counts and times"),
    "line": ("deterministic", "every line of the named functions"),
    "tracemalloc": ("deterministic", "every Python allocation, with its line"),
    "memory": ("sampling", "process RSS from a second process, every 20 ms"),
    "torch": ("deterministic", "every torch operator (and CUDA kernel on a GPU)"),
    "py-spy": ("sampling", "Python stacks read from outside, 100 times a second"),
}


@dataclass(frozen=True)
class OverheadConfig(Config):
    tools: tuple = param(
        TOOLS,
        choices=TOOLS,
        quick=TOOLS[:-1],  # py-spy's child processes re-import torch: seconds each
        help="profilers to compare with the bare run",
    )
    steps: int = param(80, min=10, max=5000, quick=25, help="training steps per run")
    repeat: int = param(5, min=1, max=50, quick=2, help="interleaved rounds")
    fault: str = param("slow-data", help="the patient's faults during the runs (none, all, ...)")

    def check(self) -> None:
        from hpclab.profiling.patient import parse_faults

        parse_faults(self.fault)


def _under(tool: str, work: Callable[[], Any], steps: int, fault: str, tmp: str) -> float:
    """Seconds of one run of ``work`` under ``tool`` (py-spy: inside a child process)."""
    if tool == "py-spy":
        out = pyspy_tool.record(pyspy_tool.child_command(steps, fault), os.path.join(tmp, "s.txt"))
        return _child_seconds(out)
    t0 = time.perf_counter()
    if tool == "bare":
        work()
    elif tool == "cprofile":
        cprofile_tree.profile_call(work)
    elif tool == "line":
        line_tool.profile_lines(work, [train, EncodedImages.__getitem__])
    elif tool == "tracemalloc":
        memory_tool.top_allocations(work)
    elif tool == "memory":
        memory_tool.rss_timeline(work)
    elif tool == "torch":
        torch_tool.profile_steps(
            lambda on_step: train(fault, steps=steps, on_step=on_step, ranges=True),
            wait=0,
            warmup=1,
            active=steps - 1,
            memory=False,
        )
    return time.perf_counter() - t0


def _bare_child(steps: int, fault: str) -> float:
    """The py-spy comparison's own baseline: the same child process without py-spy."""
    import subprocess

    res = subprocess.run(
        pyspy_tool.child_command(steps, fault),
        capture_output=True,
        text=True,
        env=pyspy_tool.child_env(),
        timeout=300,
        check=True,
    )
    return _child_seconds(res.stdout)


def _child_seconds(stdout: str) -> float:
    """The child's JSON line (py-spy adds its own ``py-spy>`` lines to the same stdout)."""
    line = [ln for ln in stdout.splitlines() if ln.startswith("{")][-1]
    return float(json.loads(line)["seconds"])


def run_overhead(config: OverheadConfig, progress: Progress) -> Result:
    tools = ["bare", *config.tools]
    if "py-spy" in tools and pyspy_tool.available():
        tools.remove("py-spy")
    tools_inproc = [t for t in tools if t != "py-spy"]
    fault, steps = config.fault, config.steps

    def work() -> Any:
        return train(fault, steps=steps)

    work()  # warm-up: imports, first allocations
    samples: dict[str, list[float]] = {t: [] for t in tools}
    samples["py-spy bare"] = []
    total = config.repeat * len(tools)
    with tempfile.TemporaryDirectory(prefix="hpclab-overhead-") as tmp:
        for rep in range(config.repeat):
            for k, tool in enumerate(tools):
                progress.update(rep * len(tools) + k, total, tool)
                samples[tool].append(_under(tool, work, steps, fault, tmp))
                if tool == "py-spy":
                    samples["py-spy bare"].append(_bare_child(steps, fault))
    progress.update(total, total, "")
    bare = Timing(tuple(samples["bare"]), warmup=1, clock="perf_counter").median_s
    records = []
    for tool in tools:
        t = Timing(tuple(samples[tool]), warmup=1, clock="perf_counter")
        base = bare
        if tool == "py-spy":  # compared with the same child run without py-spy
            base = Timing(tuple(samples["py-spy bare"]), 1, "perf_counter").median_s
        kind, what = WHAT[tool]
        records.append(
            {
                "tool": tool,
                "kind": kind,
                "records": what,
                **t.summary(),
                "slowdown": t.median_s / base,
                "in_process": tool in tools_inproc,
            }
        )
    return make_result("profiler-overhead", config, records)


@figure
def plot_overhead(result: Result) -> go.Figure:
    rows = sorted(result.records, key=lambda r: r["slowdown"])
    fig = go.Figure(
        go.Bar(
            x=[r["slowdown"] for r in rows],
            y=[r["tool"] for r in rows],
            orientation="h",
            text=[f"{r['slowdown']:.2f}x" for r in rows],
            textposition="outside",
            marker_color=["#868e96" if r["kind"] == "sampling" else "#1c7ed6" for r in rows],
            customdata=[r["records"] for r in rows],
            hovertemplate="%{y}: %{x:.2f}x<br>%{customdata}<extra></extra>",
        )
    )
    fig.add_vline(x=1.0, line_dash="dot")
    fig.update_layout(
        title="Profiler overhead on the Python-heavy patient (blue: deterministic, grey: sampling)",
        xaxis_title="wall time / bare wall time",
        height=320,
        margin={"l": 10},
    )
    return fig
