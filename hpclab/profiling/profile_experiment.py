"""Experiment ``profile``: one profiler on the patient with chosen faults (chapter 03).

``hpclab run profile --fault slow-data --tool cprofile --json``. Each tool's records carry
``kind`` (what the row is), ``tool``, and ``seconds`` or ``mib``. The raw output is kept in
files for the real viewers: ``.prof`` (SnakeViz, ``python -m pstats``) and the Chrome trace
(``chrome://tracing``, Perfetto). Huge outputs are capped: torch.profiler keeps at most
``active`` steps and the timeline at most 3000 events, and the cap is said.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from hpclab.config import Config, ConfigError, param
from hpclab.display import figure
from hpclab.dist.placement import DEVICES
from hpclab.private import private_dir
from hpclab.profiling import cprofile_tree, line_tool, memory_tool, torch_tool
from hpclab.profiling.patient import EncodedImages, parse_faults, train
from hpclab.progress import Progress
from hpclab.results import Result, make_result

TOOLS = ("cprofile", "line", "memory", "tracemalloc", "torch")


@dataclass(frozen=True)
class ProfileConfig(Config):
    fault: str = param("all", help="faults to switch on: none, all, or a comma list")
    tool: str = param("cprofile", choices=TOOLS, help="which profiler")
    steps: int = param(200, min=5, max=20000, quick=40, help="training steps profiled")
    top: int = param(12, min=1, max=200, help="rows kept in the top table")
    active: int = param(5, min=1, max=20, help="torch: steps traced (the trace is capped)")
    device: str = param(
        "cpu", choices=DEVICES, help="where the patient trains: cpu, cuda (GPU 0) or auto"
    )
    out: str = param("", help="folder for .prof / trace files ('' = the hpclab cache)")

    def check(self) -> None:
        parse_faults(self.fault)
        if self.tool == "torch" and self.steps < self.active + 2:
            from hpclab.config import ConfigError

            raise ConfigError(f"steps={self.steps} must be >= active + 2 = {self.active + 2}")


def output_dir(out: str = "") -> Path:
    """Where profiles are written: ``out`` or ``<user cache>/hpclab/profiles``."""
    if out:
        path = Path(out).expanduser()
    else:
        import platformdirs

        path = Path(platformdirs.user_cache_dir("hpclab")) / "profiles"
    try:
        path = private_dir(path)
        tempfile.TemporaryFile(dir=path).close()  # writable, not only there
    except OSError as exc:
        raise ConfigError(
            f"out={str(path)!r} cannot be written ({exc.strerror or type(exc).__name__}); "
            "allowed: a folder you can write, or '' for the hpclab cache"
        ) from None
    return path


def _stamp(config: ProfileConfig, ext: str) -> Path:
    now = datetime.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    return output_dir(config.out) / f"patient-{config.fault.replace(',', '+')}-{now}.{ext}"


def _cprofile(config: ProfileConfig, work: Any) -> tuple[list[dict], str]:
    path = _stamp(config, "prof")
    prof = cprofile_tree.profile_call(work, path)
    total = cprofile_tree.total_seconds(prof.stats)
    rows = [
        {"kind": "top", "seconds": r["self_seconds"], **r, "prof_file": str(path)}
        for r in cprofile_tree.top_table(prof.stats, config.top)
    ]
    tree = [{"kind": "tree", **n} for n in cprofile_tree.call_tree(prof.stats)]
    summary = {"kind": "total", "seconds": total, "prof_file": str(path)}
    return [summary, *rows, *tree], prof.error


def _line(config: ProfileConfig, work: Any) -> tuple[list[dict], str]:
    recs, _, error = line_tool.profile_lines(work, [train, EncodedImages.__getitem__])
    return [{"kind": "line", **r} for r in recs], error


# RSS sampling interval: the chapter's 200 steps last ~0.3 s (40 steps ~0.06 s), of which
# memory_profiler's 0.1 s default (this tool's 0.02 s before) saw a few points
SAMPLE_S = 0.005


def _during_steps(rss: list[dict[str, Any]], marks: dict[str, Any]) -> list[dict[str, Any]]:
    """The RSS samples between the first and the last step (all of them where unmarked)."""
    start, end = marks.get("steps_from_s", -math.inf), marks.get("steps_to_s", math.inf)
    return [r for r in rss if start <= r["seconds"] <= end]


def _memory(config: ProfileConfig, work: Any) -> tuple[list[dict], str]:
    marks: dict[str, float] = {}
    rss: dict[str, float] = {}  # read here at the first and last step, not when sampled

    def steps_start() -> None:
        # glibc keeps what the set-up freed resident, and a leak refills that before RSS moves
        memory_tool.release_freed_heap()
        marks["steps_from_s"] = time.time()
        rss["first"] = memory_tool.rss_mib()

    def step_done(i: int) -> None:
        if i == config.steps:
            marks["steps_to_s"] = time.time()
            rss["last"] = memory_tool.rss_mib()

    timeline, run, error = memory_tool.rss_timeline(
        lambda: work(before_steps=steps_start, on_step=step_done), SAMPLE_S, marks
    )
    ramp: dict[str, Any] = {"kind": "ramp", **marks}
    ramp["mib_per_s"] = memory_tool.ramp_mib_per_s(_during_steps(timeline, marks))
    if len(rss) == 2:
        ramp["rss_first_step_mib"] = rss["first"]
        ramp["grown_mib"] = rss["last"] - rss["first"]
    if "leak" in parse_faults(config.fault) and run is not None:  # the leak alone, for the plot
        ramp["leak_mib"] = memory_tool.leak_per_step_bytes() * config.steps / 2**20
        ramp["leak_mib_per_s"] = ramp["leak_mib"] / run.seconds
    rows = [{"kind": "rss", **r} for r in timeline]
    lines = memory_tool.line_memory(work, train) if not error else []
    lines.sort(key=lambda r: -r["increment_mib"])
    top = [{"kind": "line", "mib": r["increment_mib"], **r} for r in lines[: config.top]]
    return [ramp, *rows, *top], error


def _tracemalloc(config: ProfileConfig, work: Any) -> tuple[list[dict], str]:
    sites, peak = memory_tool.top_allocations(work, config.top)
    return [{"kind": "peak", "mib": peak}, *({"kind": "site", **s} for s in sites)], ""


def _torch(config: ProfileConfig, _work: Any) -> tuple[list[dict], str]:
    path = _stamp(config, "trace.json")
    prof, _, error = torch_tool.profile_steps(
        lambda on_step: train(
            config.fault, steps=config.steps, device=config.device, on_step=on_step, ranges=True
        ),
        device=config.device,
        active=config.active,
        trace_path=path,
    )
    ops = torch_tool.op_table(prof, config.top, config.device)
    rows = [{"kind": "op", "seconds": r["self_cpu_seconds"], **r} for r in ops]
    return [{"kind": "trace", "trace_file": str(path), "active_steps": config.active}, *rows], error


RUNNERS = {
    "cprofile": _cprofile,
    "line": _line,
    "memory": _memory,
    "tracemalloc": _tracemalloc,
    "torch": _torch,
}


def run_profile(config: ProfileConfig, progress: Progress) -> Result:
    from hpclab.dist import place

    # placement decides (and refuses device='cuda' without a GPU in one line); auto resolves
    where = place(1, config.device).devices[0]
    config = dataclasses.replace(config, device="cuda" if where.startswith("cuda") else "cpu")
    progress.update(0, 2, "warm-up")
    train(config.fault, steps=5, device=config.device)  # imports and first allocations

    def work(**hooks: Any) -> Any:
        return train(config.fault, steps=config.steps, device=config.device, **hooks)

    progress.update(1, 2, config.tool)
    rows, error = RUNNERS[config.tool](config, work)
    progress.update(2, 2, "")
    records = [{"tool": config.tool, **r} for r in rows]
    if error:
        records.append({"tool": config.tool, "kind": "error", "error": error})
    return make_result("profile", config, records)


def rows_of(result: Result, kind: str) -> list[dict[str, Any]]:
    return [r for r in result.records if r.get("kind") == kind]


@figure
def plot_profile(result: Result) -> go.Figure:
    """The view that suits the tool: icicle, line bars, RSS ramp, sites, operators + timeline."""
    tool = result.config["tool"]
    title = f"patient with fault={result.config['fault']}"
    if tool == "cprofile":
        return cprofile_tree.plot_call_tree(rows_of(result, "tree"), f"cProfile call tree, {title}")
    if tool == "torch":
        trace = rows_of(result, "trace")
        events, note = torch_tool.trace_events(trace[0]["trace_file"]) if trace else ([], "")
        return torch_tool.plot_timeline(events, note=note)
    if tool == "memory":
        return _plot_rss(rows_of(result, "rss"), rows_of(result, "ramp")[0], title)
    kind, value, label = {
        "line": ("line", "seconds", "seconds"),
        "tracemalloc": ("site", "mib", "MiB still allocated at the end"),
    }[tool]
    rows = sorted(rows_of(result, kind), key=lambda r: r[value])[-15:]
    names = [
        f"{r.get('function', r.get('site'))}:{r.get('line', '')} {r['source'][:50]}" for r in rows
    ]
    fig = go.Figure(go.Bar(x=[r[value] for r in rows], y=names, orientation="h"))
    fig.update_layout(title=f"{tool}: {title}", xaxis_title=label, margin={"l": 10}, height=480)
    return fig


def _plot_rss(rss: list[dict[str, Any]], ramp: dict[str, Any], title: str) -> go.Figure:
    """RSS growth during the steps (from the first step: the set-up before it is not the leak),
    and the ramp the leak alone would draw: its size is measured (autograd's saved tensors per
    step), so a leak below RSS's noise says so."""
    start = ramp.get("steps_from_s")
    rss = _during_steps(rss, ramp)
    t0 = start if start is not None else (rss[0]["seconds"] if rss else 0.0)
    t = [r["seconds"] - t0 for r in rss]
    base = ramp.get("rss_first_step_mib", rss[0]["rss_mib"] if rss else 0.0)
    grown = [r["rss_mib"] - base for r in rss]
    fig = go.Figure(go.Scatter(x=t, y=grown, name="RSS growth (measured)"))
    text = f"RSS during training ({title}): {ramp['mib_per_s']:+.1f} MiB/s over the second half"
    if "leak_mib_per_s" in ramp:
        text += f"<br><sup>what the leak alone keeps (dashed): {ramp['leak_mib_per_s']:+.1f} MiB/s"
        text += "</sup>"
    leak = ramp.get("leak_mib")
    if leak is not None and t:
        fig.add_scatter(
            x=[0, t[-1]], y=[0, leak], mode="lines", line={"dash": "dash", "color": "#7f7f7f"},
            name="what the leak keeps (model: saved activations x steps)",
        )  # fmt: skip
        noise = max(grown) - min(grown)
        if leak < noise / 2:
            text += (
                f"<br><sup>the leak keeps {leak:.1f} MiB over these steps (dashed), less than "
                "RSS moves by itself here: more steps show the ramp.<br>On a GPU node it sits "
                "in GPU memory, where torch.cuda.memory_allocated() draws it exactly.</sup>"
            )
    xaxis = "seconds since the first step" if start is not None else "seconds"
    fig.update_layout(title=text, xaxis_title=xaxis, yaxis_title="RSS growth since then (MiB)")
    return fig
