"""cProfile -> where the time goes: a top table and a call tree drawn as a plotly icicle
(chapter 03).

``cProfile`` is deterministic: it records every Python function call and return (and calls into
C functions), so its counts are exact and its times are inflated a little for every call
(~1.15x on a Python-heavy loop here). ``pstats`` keeps, for each function, its number of calls,
its *self* time (``tottime``: in its own body) and its *cumulative* time (``cumtime``: with
everything it called), and for each caller the share that came through it. That is enough to
rebuild the call tree SnakeViz draws, in the notebook, with no server and no internet.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

Func = tuple[str, int, str]  # pstats' key: (file, line, function name)


@dataclass
class Profiled:
    """What a profiled call left: the stats, its return value, and the error if it raised."""

    stats: pstats.Stats
    value: Any = None
    error: str = ""  # one line (the traceback is in ``error_traceback``)
    error_traceback: str = ""


def profile_call(fn: Callable[[], Any], path: str | os.PathLike | None = None) -> Profiled:
    """Run ``fn()`` under cProfile. A run that raises still returns what was collected.

    ``path``: also save the raw profile (``snakeviz path``, ``python -m pstats path``).
    """
    prof = cProfile.Profile()
    value, error, tb = None, "", ""
    prof.enable()
    try:
        value = fn()
    except Exception as exc:  # noqa: BLE001 - the profile of a failing run is the point
        error, tb = f"{type(exc).__name__}: {exc}", traceback.format_exc()
    finally:
        prof.disable()
    if path is not None:
        prof.dump_stats(str(path))
    return Profiled(pstats.Stats(prof), value, error, tb)


def func_name(func: Func) -> str:
    """``decode (patient.py:71)`` or ``<built-in method torch.addmm>``."""
    file, line, name = func
    if file == "~" or line == 0:
        return name
    return f"{name} ({os.path.basename(file)}:{line})"


def _profiler_frames(func: Func) -> bool:
    return func[2] == "<method 'disable' of '_lsprof.Profiler' objects>"


def top_table(stats: pstats.Stats, top: int = 15, sort: str = "tottime") -> list[dict[str, Any]]:
    """Records for the ``top`` functions by self time (``tottime``) or ``cumtime``."""
    if sort not in ("tottime", "cumtime"):
        raise ValueError(f"sort={sort!r}; allowed: tottime, cumtime")
    raw = stats.stats  # type: ignore[attr-defined]
    total = stats.total_tt or 1e-12  # type: ignore[attr-defined]
    rows = []
    for func, (_cc, nc, tt, ct, _callers) in raw.items():
        if _profiler_frames(func):
            continue
        rows.append(
            {
                "function": func_name(func),
                "file": func[0],
                "line": func[1],
                "calls": nc,
                "self_seconds": tt,
                "cumulative_seconds": ct,
                "self_share": tt / total,
            }
        )
    key = "self_seconds" if sort == "tottime" else "cumulative_seconds"
    rows.sort(key=lambda r: r[key], reverse=True)
    return rows[:top]


def total_seconds(stats: pstats.Stats) -> float:
    """The sum of all self times: the profiled run's time as cProfile saw it."""
    return float(stats.total_tt)  # type: ignore[attr-defined]


def call_tree(
    stats: pstats.Stats, max_depth: int = 12, min_share: float = 0.005
) -> list[dict[str, Any]]:
    """Nodes ``{id, parent, label, seconds, self_seconds}`` of the call tree, top down.

    pstats keeps caller->callee edges, not whole stacks, so a function reached from several
    callers has its children split among them in proportion to the time each caller spent in it
    (what SnakeViz does too). Edges under ``min_share`` of the total and calls that would
    recurse into a function already on the path are left out; ``max_depth`` caps the depth.
    """
    raw = stats.stats  # type: ignore[attr-defined]
    children: dict[Func, list[tuple[Func, float]]] = {}
    for callee, (_cc, _nc, _tt, _ct, callers) in raw.items():
        for caller, edge in callers.items():
            children.setdefault(caller, []).append((callee, edge[3]))  # edge cumtime
    roots = [f for f, v in raw.items() if not v[4] and not _profiler_frames(f)]
    total = sum(raw[f][3] for f in roots) or 1e-12
    nodes: list[dict[str, Any]] = []

    def visit(func: Func, seconds: float, parent: str, path: tuple[Func, ...]) -> None:
        node_id = f"{parent}/{func_name(func)}" if parent else func_name(func)
        ct, tt = raw[func][3], raw[func][2]
        scale = seconds / ct if ct > 0 else 0.0
        nodes.append(
            {
                "id": node_id,
                "parent": parent,
                "label": func_name(func),
                "seconds": seconds,
                "self_seconds": tt * scale,
            }
        )
        if len(path) >= max_depth:
            return
        kids = [(c, s * scale) for c, s in children.get(func, ()) if c not in path]
        kids = [(c, s) for c, s in kids if s >= min_share * total]
        room = sum(s for _, s in kids)
        shrink = min(1.0, seconds * 0.999 / room) if room > 0 else 1.0  # float slack
        for child, s in sorted(kids, key=lambda k: -k[1]):
            visit(child, s * shrink, node_id, (*path, child))

    for root in sorted(roots, key=lambda f: -raw[f][3]):
        if raw[root][3] >= min_share * total:
            visit(root, raw[root][3], "", (root,))
    return nodes


def plot_call_tree(nodes: list[dict[str, Any]], title: str = "", kind: str = "icicle") -> go.Figure:
    """The call tree as a plotly icicle (or ``kind="sunburst"``, SnakeViz's default view).

    Width = cumulative time; hover shows self time. Works offline (no server, no CDN)."""
    cls = go.Icicle if kind == "icicle" else go.Sunburst
    total = max((n["seconds"] for n in nodes if not n["parent"]), default=1.0)
    trace = cls(
        ids=[n["id"] for n in nodes],
        parents=[n["parent"] for n in nodes],
        labels=[n["label"].split(" (")[0] for n in nodes],
        values=[n["seconds"] for n in nodes],
        branchvalues="total",
        customdata=[
            [n["label"], n["seconds"], n["self_seconds"], n["seconds"] / total] for n in nodes
        ],
        hovertemplate="%{customdata[0]}<br>cumulative %{customdata[1]:.3f} s "
        "(%{customdata[3]:.0%})<br>self %{customdata[2]:.3f} s<extra></extra>",
        maxdepth=6,
        **({"tiling": {"orientation": "v"}} if kind == "icicle" else {}),  # root on top
    )
    fig = go.Figure(trace)
    fig.update_layout(
        title=title or "cProfile call tree (width = cumulative time; click to zoom)",
        margin={"t": 50, "l": 10, "r": 10, "b": 10},
        height=520,
    )
    return fig
