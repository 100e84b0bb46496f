"""line_profiler -> which line (chapter 03).

cProfile says *which function*; line_profiler says *which line of it*: hits, total time, time
per hit and share of the function's time, for each line of the functions you name. It traces
every line (a large overhead on tight Python loops: ~6x here), so profile one function, not the
whole program. ``%lprun`` shows its table in the pager (an empty cell in a headless run): this
module calls the ``LineProfiler`` API and returns records, rendered as a table in the cell.
"""

from __future__ import annotations

import inspect
import linecache
from collections.abc import Callable
from typing import Any


def profile_lines(
    fn: Callable[[], Any], functions: list[Callable]
) -> tuple[list[dict[str, Any]], Any, str]:
    """Run ``fn()`` with line timing of ``functions``; returns ``(records, value, error)``.

    Records: one per executed line, ``function``, ``line``, ``hits``, ``seconds``,
    ``per_hit_us``, ``share`` (of that function's measured time), ``source`` and ``hot``
    (True for each function's most expensive line). A run that raises keeps its lines.
    """
    from line_profiler import LineProfiler

    lp = LineProfiler()
    for f in functions:
        lp.add_function(inspect.unwrap(f))
    value, error = None, ""
    lp.enable_by_count()
    try:
        value = fn()
    except Exception as exc:  # noqa: BLE001 - what was collected is still shown
        error = f"{type(exc).__name__}: {exc}"
    finally:
        lp.disable_by_count()
    return line_records(lp.get_stats()), value, error


def line_records(stats: Any) -> list[dict[str, Any]]:
    """Flatten ``LineProfiler.get_stats()`` (its ``unit`` is 1e-9 s in line_profiler 5)."""
    records: list[dict[str, Any]] = []
    for (filename, _first, name), lines in stats.timings.items():
        total = sum(t for _, _, t in lines) or 1
        rows = []
        for lineno, hits, t in lines:
            rows.append(
                {
                    "function": name,
                    "line": lineno,
                    "hits": hits,
                    "seconds": t * stats.unit,
                    "per_hit_us": t * stats.unit / hits * 1e6 if hits else 0.0,
                    "share": t / total,
                    "source": linecache.getline(filename, lineno).rstrip(),
                    "hot": False,
                }
            )
        if rows:
            max(rows, key=lambda r: r["seconds"])["hot"] = True
        records.extend(rows)
    return records


def styled_table(records: list[dict[str, Any]]):
    """A pandas Styler: the hot line of each function marked, times in ms."""
    import pandas as pd

    df = pd.DataFrame(records)
    if df.empty:
        return df
    df = df.assign(ms=df["seconds"] * 1e3, share=df["share"] * 100)
    cols = ["function", "line", "hits", "ms", "per_hit_us", "share", "source"]

    def mark(row: pd.Series) -> list[str]:
        hot = bool(df.loc[row.name, "hot"])
        return ["background-color: #ffd8a8; font-weight: bold" if hot else ""] * len(row)

    return (
        df[cols]
        .style.apply(mark, axis=1)
        .format({"ms": "{:.2f}", "per_hit_us": "{:.2f}", "share": "{:.1f} %"})
        .set_properties(subset=["source"], **{"text-align": "left", "white-space": "pre"})
        .hide(axis="index")
    )
