"""Log axes that read as numbers (used by :func:`hpclab.display.figure` on every plot): ticks at
1, 2, 5 per decade written out (``0.5``, ``200``, ``10k``), never plotly's bare ``2`` and ``5``
between powers of ten; GPU-count axes at every power of two."""

from __future__ import annotations

import math
from typing import Any


def tick_label(v: float) -> str:
    """A log axis's tick: ``0.01``, ``5``, ``200``, ``10k``, ``2M`` (never a bare exponent)."""
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= 10 * scale if suffix == "k" else abs(v) >= scale:
            return f"{v / scale:g}{suffix}"
    return f"{v:g}"


def log_ticks(lo: float, hi: float) -> list[float]:
    """Tick values for a log axis over ``[lo, hi]``: 1, 2, 5 per decade over up to two decades,
    powers of ten (every other one past eight decades) over more."""
    decades = math.log10(hi / lo)
    k0, k1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    mantissas = (1, 2, 5) if decades <= 2 else (1,)
    step = 2 if decades > 8 else 1
    ticks = [m * 10.0**k for k in range(k0, k1 + 1, step) for m in mantissas]
    first = max([t for t in ticks if t <= lo] or ticks[:1])  # one tick at or past each end
    last = min([t for t in ticks if t >= hi] or ticks[-1:])
    return [t for t in ticks if first <= t <= last]


DOUBLING = math.log10(2)  # a log axis's dtick for a tick at every power of two (GPU counts)


def doubling_ticks(lo: float, hi: float) -> list[float]:
    """Powers of two over ``[lo, hi]`` (every other one past eight): 1, 2, 4 ... GPUs."""
    k0, k1 = math.floor(math.log2(lo)), math.ceil(math.log2(hi))
    step = 2 if k1 - k0 > 8 else 1
    return [2.0**k for k in range(k0, k1 + 1, step)]


def _axis_data(fig: Any, axis: str) -> list[float]:
    """The positive numbers that traces draw on layout axis ``axis`` (``"xaxis2"``...)."""
    letter, ref = axis[0], axis[0] + axis[5:]  # "xaxis2" -> "x", "x2"
    out: list[float] = []
    for trace in fig.data:
        if (getattr(trace, f"{letter}axis", None) or letter) != ref:
            continue
        values = list(getattr(trace, letter, None) or ())
        base = getattr(trace, "base", None)
        if base is not None and getattr(trace, "orientation", None) == (
            "h" if letter == "x" else "v"
        ):
            bases = list(base) if isinstance(base, (list, tuple)) else [base] * len(values)
            values += [b + v for b, v in zip(bases, values, strict=False)]
        out += [float(v) for v in values if isinstance(v, (int, float)) and v > 0]
    return out


def readable_log_axes(fig: Any) -> Any:
    """Log axes the plot left to plotly get ticks with whole values (``1``, ``2``, ``5``, ``10``,
    ``20``... or ``1k``, ``10k``...), not plotly's lone ``2`` and ``5`` between powers of ten;
    a GPU-count axis (``dtick=DOUBLING``) gets 1, 2, 4, 8 ... written out."""
    for axis, spec in fig.layout.to_plotly_json().items():
        if not axis[1:].startswith("axis") or spec.get("type") != "log":
            continue
        if any(k in spec for k in ("tickvals", "tickmode")):
            continue
        doubling = spec.get("dtick") is not None and abs(spec["dtick"] - DOUBLING) < 1e-3
        if spec.get("dtick") is not None and not doubling:
            continue
        data = _axis_data(fig, axis)
        if not data:
            continue
        vals = (doubling_ticks if doubling else log_ticks)(min(data), max(data))
        fig.layout[axis].update(
            dtick=None, tickmode="array", tickvals=vals, ticktext=[tick_label(v) for v in vals]
        )
    return fig
