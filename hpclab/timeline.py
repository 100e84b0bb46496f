"""Timelines: spans of time drawn as horizontal bars, one row (lane) per thread, stream, rank or
loop (chapter 02's copy/compute overlap, chapter 03's torch.profiler trace, chapter 06's pipeline
schedules).

A span is a start and a length on a lane. Plotly draws it as a horizontal bar with ``base`` =
start and ``x`` = length. :func:`add_spans` adds one trace of such bars. The space between two bars
of a lane is where that thread, stream or rank was idle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def add_spans(
    fig: Any,
    lanes: Sequence[str],
    starts: Sequence[float],
    lengths: Sequence[float],
    *,
    name: str,
    color: str | None = None,
    text: Sequence[str] | None = None,
    hover: str | None = None,
    row: int | None = None,
    col: int | None = None,
    **bar: Any,
) -> None:
    """One trace of spans on ``fig``: span i on lane ``lanes[i]`` from ``starts[i]`` for
    ``lengths[i]`` (any one time unit). ``text`` labels the bars inside; ``hover`` is a plotly
    hover template (``%{base}`` is the start, ``%{x}`` the length); other keywords go to
    ``go.Bar`` (``legendgroup``, ``showlegend``, ``hovertext``...)."""
    if not len(lanes) == len(starts) == len(lengths):
        raise ValueError(
            f"lanes, starts and lengths differ in length: {len(lanes)}, {len(starts)}, "
            f"{len(lengths)}"
        )
    style: dict[str, Any] = {"orientation": "h", "name": name, **bar}
    if color is not None:
        style["marker"] = {"color": color, "line": {"color": "white", "width": 1}}
    if text is not None:
        style.update(text=list(text), textposition="inside", insidetextanchor="middle")
    if hover is not None:
        style["hovertemplate"] = hover
    where = {"row": row, "col": col} if row is not None else {}
    fig.add_bar(y=list(lanes), x=list(lengths), base=list(starts), **style, **where)
