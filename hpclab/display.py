"""How numbers, tables and figures look, the same in every chapter (chapter 00 on).

- :func:`readable`: a DataFrame for display: counts as integers, every other number with three
  significant digits (no ``workers 0.0``, no ``20498.674094 samples/s``);
- :func:`plural`: "1 thread", "2 threads";
- :func:`series_color`: one colour per series name, the same in every subplot, legend and run;
- :func:`figure`: the decorator every ``plot_*`` function wears: stable colours, readable
  layout (legend below, titles that do not collide), and, when other processes took our cores
  during the run, the sentence that says so on the plot itself (:mod:`hpclab.measure.cpu_share`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

# Colours of series every chapter names; other names get the next free colour on first sight
# and keep it for the life of the kernel (adding a run never recolours the earlier ones).
PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f",
    "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173",
)  # fmt: skip
REFERENCE_GREY = "#aaaaaa"
_FIXED = {
    "cpu": PALETTE[0],
    "cuda": PALETTE[3],
    "live": PALETTE[0],
    "model": PALETTE[9],
    "reference": REFERENCE_GREY,
    "computing": PALETTE[0],
    "waiting for data": PALETTE[3],
}
_assigned: dict[str, str] = {}


def series_color(name: str) -> str:
    """The colour of series ``name`` (stable for as long as the kernel runs)."""
    key = str(name).strip().lower()
    if key in _FIXED:
        return _FIXED[key]
    if key not in _assigned:
        used = set(_assigned.values()) | set(_FIXED.values())
        free = [c for c in PALETTE if c not in used]
        _assigned[key] = free[0] if free else PALETTE[len(_assigned) % len(PALETTE)]
    return _assigned[key]


def plural(n: float, word: str, many: str | None = None) -> str:
    """``plural(1, "thread") == "1 thread"``; ``plural(2, "thread") == "2 threads"``."""
    count = int(n) if float(n).is_integer() else n
    return f"{count} {word if count == 1 else (many or word + 's')}"


def number(v: float) -> str:
    """Three significant digits, never scientific notation between 1e-4 and 1e15."""
    if v != v or not math.isfinite(v):
        return str(v)
    a = abs(v)
    if a == 0 or a >= 100:
        return f"{v:.0f}"
    if a < 1e-4:
        return f"{v:.2e}"
    return f"{v:.{2 - math.floor(math.log10(a))}f}"


class _Readable:
    """Mixed into a DataFrame: the values stay numbers, only their display changes."""

    def _repr_html_(self) -> str:
        import pandas as pd

        with pd.option_context("display.float_format", number):
            return super()._repr_html_()

    def __repr__(self) -> str:
        import pandas as pd

        with pd.option_context("display.float_format", number):
            return super().__repr__()

    def to_string(self, *args: Any, **kwargs: Any) -> str:
        kwargs.setdefault("float_format", number)
        return super().to_string(*args, **kwargs)


def _readable_class() -> type:
    import pandas as pd

    global _READABLE
    if _READABLE is None:

        class ReadableFrame(_Readable, pd.DataFrame):
            @property
            def _constructor(self) -> type:  # selections and copies stay readable
                return ReadableFrame

        _READABLE = ReadableFrame
    return _READABLE


_READABLE: type | None = None


def readable(frame: Any) -> Any:
    """``frame`` for display (every table shown goes through it): whole-number columns become
    integers, every other number shows three significant digits; the values stay numbers, so
    the table can still be sorted, selected and computed on."""
    import pandas as pd

    out = _readable_class()(frame.copy())
    for col in out.columns:
        s = out[col]
        if not pd.api.types.is_float_dtype(s):
            continue
        values = s.dropna()
        if len(values) and (values == values.round()).all() and values.abs().max() < 2**53:
            out[col] = s.round().astype("Int64")
    return out


def _trace_key(trace: Any) -> str:
    return str(trace.legendgroup or trace.name or "")


def _explicit_color(trace: Any) -> bool:
    for part in ("marker", "line"):
        obj = getattr(trace, part, None)
        if obj is not None and getattr(obj, "color", None) is not None:
            return True
    return False


def apply_series_colors(fig: Any) -> Any:
    """Colour every trace that has no colour of its own by its series name (legendgroup, else
    name): one series, one colour, in every subplot, the legend and every later run. Colours a
    plot chose on purpose (grey for reference, red for "above the roof") stay."""
    for trace in fig.data:
        key = _trace_key(trace)
        if not key or _explicit_color(trace):
            continue
        color = series_color(key)
        if getattr(trace, "marker", None) is not None:
            trace.marker.color = color
        if trace.type == "scatter":
            trace.line.color = color
    return fig


def load_note(result: Any) -> str:
    """The sentence that says a live result was measured while others held our cores (none for
    a result that only evaluates a model or shows references)."""
    from hpclab.results import measured_here

    share = getattr(result, "env", {}).get("cpu_share") if result is not None else None
    if not share or not share.get("disturbed") or not measured_here(result):
        return ""
    from hpclab.measure.cpu_share import CpuShare

    fields = {k: share[k] for k in ("cores", "wall_s", "own_cores", "others_cores")}
    fields["waited_cores"] = share.get("waited_cores")
    return CpuShare(**fields).sentence()


def readable_layout(fig: Any) -> Any:
    """Room for the title and subplot titles, a legend that does not cover the data, ticks that
    do not smear (what the plot set itself is kept)."""
    layout = fig.layout
    n_x = sum(1 for k in layout.to_plotly_json() if k.startswith("xaxis"))
    if layout.margin.t is None:
        fig.update_layout(margin={"t": 100 if layout.title.text and n_x > 1 else 80})
    if layout.legend.orientation is None:
        fig.update_layout(legend={"orientation": "h", "yanchor": "top", "y": -0.22, "x": 0})
    if n_x > 1:
        fig.update_annotations(font_size=12)  # subplot titles
        fig.update_xaxes(nticks=6, automargin=True)
        fig.update_yaxes(automargin=True)
    if not layout.height:
        fig.update_layout(height=440)
    return fig


def note_on(fig: Any, text: str) -> Any:
    """Add ``text`` under the title of ``fig``, in red: something about these numbers is off."""
    if text:
        title = fig.layout.title.text or ""
        red = f'<span style="color:#b42318;font-size:12px">{text}</span>'
        fig.update_layout(title_text=f"{title}<br>{red}" if title else red)
        fig.update_layout(margin={"t": max(fig.layout.margin.t or 0, 110)})
    return fig


def figure(plot: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator for ``plot_*(result, ...) -> Figure``: stable colours, readable layout, and the
    CPU-share sentence when the run was disturbed."""

    @functools.wraps(plot)
    def wrapper(result: Any = None, *args: Any, **kwargs: Any) -> Any:
        fig = plot(result, *args, **kwargs)
        apply_series_colors(fig)
        readable_layout(fig)
        return note_on(fig, load_note(result))

    return wrapper
