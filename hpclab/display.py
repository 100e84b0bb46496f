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

from hpclab.axes import readable_log_axes

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
    a = abs(float(f"{v:.3g}"))  # 9.9999 rounds to 10.0, not 10.00: the rounded value's digits
    return f"{v:.{max(0, 2 - math.floor(math.log10(a)))}f}"


# pandas' display options for every table the course shows, set here once: three significant
# digits, no cell cut at 50 characters (a peak's derivation, a source), no column hidden
# behind "...".
def _options() -> tuple[Any, ...]:
    return (
        "display.float_format", number,
        "display.max_colwidth", None,
        "display.max_columns", None,
    )  # fmt: skip


def _whole_to_int(frame: Any) -> Any:
    """``frame`` (changed in place) with its whole-number float columns as integers."""
    import pandas as pd

    for i in range(frame.shape[1]):
        s = frame.iloc[:, i]
        if not pd.api.types.is_float_dtype(s):
            continue
        values = s.dropna()
        if len(values) and (values == values.round()).all() and values.abs().max() < 2**53:
            frame.isetitem(i, s.round().astype("Int64"))
    return frame


class _Readable:
    """Mixed into a DataFrame: the values stay numbers, only their display changes."""

    def _shown(self) -> Any:
        import pandas as pd

        return _whole_to_int(pd.DataFrame(self).copy())

    def _repr_html_(self) -> str:
        import pandas as pd

        with pd.option_context(*_options()):
            return self._shown()._repr_html_()

    def __repr__(self) -> str:
        import pandas as pd

        with pd.option_context(*_options()):
            return repr(self._shown())

    def to_string(self, *args: Any, **kwargs: Any) -> str:
        import pandas as pd

        kwargs.setdefault("float_format", number)
        with pd.option_context(*_options()):
            return self._shown().to_string(*args, **kwargs)


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
    return _readable_class()(_whole_to_int(frame.copy()))


def shown_readably(frame: Any) -> Any:
    """``frame`` with its values untouched (floats stay floats), displayed as :func:`readable`
    shows it: what ``Result.frame()`` returns."""
    return _readable_class()(frame)


def _trace_key(trace: Any) -> str:
    # Icicles, sunbursts and tables have no legend group (and some no name).
    return str(getattr(trace, "legendgroup", None) or getattr(trace, "name", None) or "")


def _explicit_color(trace: Any) -> bool:
    for part in ("marker", "line"):
        obj = getattr(trace, part, None)
        if obj is not None and getattr(obj, "color", None) is not None:
            return True
    return False


# Traces that draw one series in one colour (icicles, sunbursts, heatmaps colour by value).
_SERIES_TYPES = ("scatter", "scattergl", "bar", "box", "histogram", "violin")


def apply_series_colors(fig: Any) -> Any:
    """Colour every trace that has no colour of its own by its series name (legendgroup, else
    name): one series, one colour, in every subplot, the legend and every later run. Colours a
    plot chose on purpose (grey for reference, red for "above the roof") stay."""
    for trace in fig.data:
        key = _trace_key(trace)
        if trace.type not in _SERIES_TYPES or not key or _explicit_color(trace):
            continue
        color = series_color(key)
        if getattr(trace, "marker", None) is not None:
            trace.marker.color = color
        if trace.type == "scatter":
            trace.line.color = color
    return fig


def run_label(record: dict[str, Any], shown: tuple[str, ...] = ()) -> str:
    """What set this record's run apart from the other runs a panel accumulated (its ``run``
    settings, as :class:`~hpclab.widgets.panel.ExperimentPanel` marks them), leaving out the
    settings the plot already shows (``shown``: in the series name or on the x axis)."""
    parts = []
    for k, v in (record.get("run") or {}).items():
        if k not in shown:
            value = ",".join(str(x) for x in v) if isinstance(v, (list, tuple)) else v
            parts.append(f"{k.replace('_', ' ')} {value}")
    return ", ".join(parts)


def split_runs(
    series: dict[str, list[dict[str, Any]]], shown: tuple[str, ...] = ()
) -> dict[str, list[dict[str, Any]]]:
    """``series`` (rows by series name) with each series that holds rows of several accumulated
    runs split into one series per run, named ``"name (batch size 64)"``: two runs never share a
    line or a legend entry."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name, rows in series.items():
        labels = {run_label(r, shown) for r in rows}
        for r in rows:
            label = run_label(r, shown)
            out.setdefault(f"{name} ({label})" if len(labels) > 1 else name, []).append(r)
    return out


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
        # at most 6 ticks on a numeric axis of a narrow subplot; a category axis keeps every
        # label (nticks there would hide every other category's name)
        named = {getattr(t, "xaxis", None) or "x" for t in fig.data if _has_categories(t)}
        for key in [k for k in layout.to_plotly_json() if k.startswith("xaxis")]:
            ref = "x" + key[len("xaxis") :]
            fig.layout[key].update(automargin=True, **({} if ref in named else {"nticks": 6}))
        fig.update_yaxes(automargin=True)
    if not layout.height:
        fig.update_layout(height=440)
    return readable_log_axes(fig)


def _has_categories(trace: Any) -> bool:
    """True when the trace's x values are names (a category axis), not numbers."""
    xs = getattr(trace, "x", None)
    return xs is not None and len(xs) > 0 and isinstance(xs[0], str)


def note_on(fig: Any, text: str) -> Any:
    """Add ``text`` under the title of ``fig``, in red: something about these numbers is off."""
    if text:
        title = fig.layout.title.text or ""
        red = f'<span style="color:#b42318;font-size:12px">{text}</span>'
        fig.update_layout(title_text=f"{title}<br>{red}" if title else red)
    return _room_for_title(fig)


def _room_for_title(fig: Any) -> Any:
    """A top margin that holds every line of the title (a note under it included)."""
    title = fig.layout.title.text or ""
    if title:
        lines = title.count("<br>") + 1
        fig.update_layout(margin={"t": max(fig.layout.margin.t or 0, 60 + 22 * lines)})
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
