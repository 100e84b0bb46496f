"""torch.profiler -> which operators, and the timeline (chapter 03).

The profiler records every torch operator (and, with CUDA activity, every kernel and memcpy on
the GPU) between ``schedule`` steps: ``wait`` steps are skipped, ``warmup`` steps are traced and
thrown away (the profiler's own start-up cost lands there), ``active`` steps are kept.
``record_function`` ranges (the patient's ``data``, ``forward+backward``, ``optimizer`` and
``logging``) appear as named bands. ``key_averages()`` sums the operators; *self* time is the
time in the operator itself, without the operators it called.

The trace is saved as a Chrome trace (JSON; open it in ``chrome://tracing`` or Perfetto on a
machine with internet) and drawn here as a plotly timeline. TensorBoard's profiler plugin is
deprecated. On some torch versions the profiler prints stray lines (``USDT: ...``) straight to
file descriptor 2; :func:`quiet_fd2` keeps them out of the cell.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import plotly.graph_objects as go

from hpclab.timeline import add_spans

NOISE = ("USDT", "STAGE:", "Memory block of unknown size")  # the profiler's stray lines
MAX_EVENTS = 3000  # the timeline draws at most this many events (the longest ones)


@contextlib.contextmanager
def quiet_fd2() -> Iterator[None]:
    """Capture file descriptor 2 (C++ writes go there, not to ``sys.stderr``); afterwards
    re-emit every captured line except the profiler's known noise."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            for line in tmp.read().decode(errors="replace").splitlines():
                if line.strip() and not any(n in line for n in NOISE):
                    print(line, file=sys.stderr)


def activities(device: str) -> list:
    from torch.profiler import ProfilerActivity

    acts = [ProfilerActivity.CPU]
    if device.startswith("cuda"):
        acts.append(ProfilerActivity.CUDA)
    return acts


def profile_steps(
    run: Callable[[Callable[[int], None]], Any],
    device: str = "cpu",
    wait: int = 1,
    warmup: int = 1,
    active: int = 3,
    memory: bool = True,
    trace_path: str | os.PathLike | None = None,
) -> tuple[Any, Any, str]:
    """Profile a run that calls ``on_step(i)`` after each step; returns ``(prof, value, error)``.

    ``run(on_step)`` must do at least ``wait + warmup + active`` steps. A run that raises still
    returns the profiler with what it recorded.
    """
    from torch.profiler import profile, schedule

    sched = schedule(wait=wait, warmup=warmup, active=active, repeat=1)
    value, error = None, ""
    with quiet_fd2():
        prof = profile(
            activities=activities(device),
            schedule=sched,
            profile_memory=memory,
            record_shapes=False,  # shapes cost ~1.5x more overhead; turn on to group by shape
        )
        prof.start()
        try:
            value = run(lambda _i: prof.step())
        except Exception as exc:  # noqa: BLE001 - keep what was recorded
            error = f"{type(exc).__name__}: {exc}"
        finally:
            prof.stop()
        if trace_path is not None:
            prof.export_chrome_trace(str(trace_path))
    return prof, value, error


def op_table(prof: Any, top: int = 15, device: str = "cpu") -> list[dict[str, Any]]:
    """``key_averages()`` as records sorted by self time (CPU, or CUDA on a GPU run)."""
    rows = []
    gpu = device.startswith("cuda")
    for evt in prof.key_averages():
        rows.append(
            {
                "operator": evt.key,
                "calls": evt.count,
                "self_cpu_seconds": evt.self_cpu_time_total / 1e6,
                "cpu_total_seconds": evt.cpu_time_total / 1e6,
                "self_device_seconds": getattr(evt, "self_device_time_total", 0.0) / 1e6,
                "self_cpu_mib": getattr(evt, "self_cpu_memory_usage", 0) / 2**20,
            }
        )
    key = "self_device_seconds" if gpu else "self_cpu_seconds"
    ranges = {"data", "forward+backward", "optimizer", "logging"}
    rows = [
        r for r in rows if r["operator"] not in ranges and not r["operator"].startswith("Profiler")
    ]
    rows.sort(key=lambda r: r[key], reverse=True)
    return rows[:top]


def trace_events(path: str | os.PathLike, limit_mib: float = 200.0) -> tuple[list[dict], str]:
    """Complete (``ph == "X"``) events of a Chrome trace, longest first, at most
    :data:`MAX_EVENTS`; and a note saying what was capped (empty when nothing was)."""
    size = Path(path).stat().st_size / 2**20
    if size > limit_mib:
        return [], f"trace is {size:.0f} MiB (> {limit_mib:.0f} MiB): profile fewer active steps"
    with open(path) as f:
        data = json.load(f)
    events = [e for e in data.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    note = ""
    if len(events) > MAX_EVENTS:
        note = f"showing the {MAX_EVENTS} longest of {len(events)} events"
        events = sorted(events, key=lambda e: -e["dur"])[:MAX_EVENTS]
    return events, note


def _lane(event: dict) -> str:
    cat = event.get("cat", "")
    if cat == "user_annotation":
        return "ranges"
    if cat in ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"):
        return f"GPU {cat} (stream {event.get('tid')})"
    return f"CPU {cat or 'op'} (thread {event.get('tid')})"


def plot_timeline(events: list[dict], title: str = "", note: str = "") -> go.Figure:
    """The trace as horizontal bars: one lane per range row / CPU thread / GPU stream, time in
    ms from the first event. Gaps in a GPU lane are where the GPU waited for the CPU."""
    fig = go.Figure()
    if not events:
        fig.update_layout(title=note or "no events in the trace")
        return fig
    t0 = min(e["ts"] for e in events)
    lanes: dict[str, list[dict]] = {}
    for e in events:
        lanes.setdefault(_lane(e), []).append(e)
    for lane, evs in sorted(lanes.items()):
        add_spans(
            fig,
            [lane] * len(evs),
            [(e["ts"] - t0) / 1e3 for e in evs],
            [e["dur"] / 1e3 for e in evs],
            name=lane,
            text=[e["name"] for e in evs],
            hover="%{text}<br>start %{base:.3f} ms, %{x:.3f} ms<extra></extra>",
        )
    fig.update_layout(
        title=title or "torch.profiler trace (active steps)" + (f" - {note}" if note else ""),
        xaxis_title="time since first event (ms)",
        barmode="overlay",
        showlegend=False,
        height=200 + 40 * len(lanes),
        margin={"l": 10},
    )
    return fig
